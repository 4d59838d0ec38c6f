"""Document titles as names: does a text spell out a document's title?

Wikipedia-style corpora link pages by naming them, and enterprise ones do too (a policy names the
handbook it amends). The chain orders evidence by these links and the fact-check reads them (a page a
relevant page names is a bridge, not noise; two pages each about its own titled subject state different
facts without contradicting each other). Matching is on whole words and case-sensitive ("Casino, New
South Wales" is not named by "hotel and casino"), on the title without its trailing parenthetical
("Awake (film)" is named by "Awake").
"""

from __future__ import annotations

import re

_PAREN = re.compile(r"\s*\([^)]*\)\s*$")  # "Kiss and Tell (1945 film)" -> "Kiss and Tell"
# Not ``factcheck.text.words``: that lower-cases (case tells a title from a common word here) and keeps
# apostrophes whole, so "James's" and "James’s" would differ; here both are "James s".
_WORD = re.compile(r"\w+")
MIN_TITLE_CHARS = 3  # shorter titles ("US", "X") are named by accident too often


def clean_title(title: str) -> str:
    """The title without a trailing parenthetical: the name a text would use."""
    return _PAREN.sub("", title).strip()


def spelled(text: str) -> str:
    """Words only, case kept, single-spaced and padded: ``" Skin Yard "``. Spell a text once and test
    many titles against it with :func:`names`."""
    return f" {' '.join(_WORD.findall(text))} "


def names(spelled_text: str, title: str) -> bool:
    """Whether ``spelled_text`` (from :func:`spelled`) spells out ``title`` (a raw title)."""
    name = spelled(clean_title(title))
    return len(name.strip()) >= MIN_TITLE_CHARS and name in spelled_text
