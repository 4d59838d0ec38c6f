"""Document titles as names: does a text spell out a document's title?

Wikipedia-style corpora link pages by naming them, and enterprise ones do too (a policy names the
handbook it amends). The chain orders evidence by these links and the fact-check reads them (a page a
relevant page names is a bridge, not noise; two pages each about its own titled subject state different
facts without contradicting each other). Matching is on whole words and case-sensitive ("Casino, New
South Wales" is not named by "hotel and casino"), on the title without its trailing parenthetical
("Awake (film)" is named by "Awake").
"""

from __future__ import annotations

import calendar
import html

from services.common.words import SPELLED_WORD

MIN_TITLE_CHARS = 3  # shorter titles ("US", "X") are named by accident too often


def clean_title(title: str) -> str:
    """The title without a trailing parenthetical, HTML character references decoded: the name a text
    would use ("Will &amp; Grace" is named by "Will & Grace"; titles exported from web systems keep
    the escapes their pages' texts have lost)."""
    return _drop_trailing_parenthetical(html.unescape(title)).strip()


def _drop_trailing_parenthetical(text: str) -> str:
    r"""``text`` without a final ``(…)`` and the white space around it: "Kiss and Tell (1945 film)" ->
    "Kiss and Tell". The parenthetical opens at the first "(" after the ")" before the last one, as the
    regex ``\s*\([^)]*\)\s*$`` removed it; a scan rather than that regex, which tried every "(" and
    white space character as a start and rescanned the rest from each (100,000 "(" took 7 s)."""
    end = len(text.rstrip())
    if end == 0 or text[end - 1] != ")":
        return text
    opening = text.find("(", text.rfind(")", 0, end - 1) + 1, end - 1)
    if opening < 0:
        return text
    start = opening
    while start > 0 and text[start - 1].isspace():
        start -= 1
    return text[:start]


def spelled(text: str) -> str:
    """Words only, case kept, single-spaced and padded: ``" Skin Yard "``. Spell a text once and test
    many titles against it with :func:`names`."""
    return f" {' '.join(SPELLED_WORD.findall(text))} "


def names(spelled_text: str, title: str) -> bool:
    """Whether ``spelled_text`` (from :func:`spelled`) spells out ``title`` (a raw title)."""
    name = spelled(clean_title(title))
    return len(name.strip()) >= MIN_TITLE_CHARS and name in spelled_text


# Calendar words open sentences and fill dates everywhere: a page titled "December (magazine)" is not
# named by "in December 1990".
_CALENDAR = frozenset(w for w in (*calendar.month_name, *calendar.day_name) if w)


def common_name(title: str, spelled_text: str) -> bool:
    """Whether ``title``'s name is a common word rather than a name: a number ("1920 (film)"), a month or
    weekday, or a one-word name that ``spelled_text`` (texts read together, from :func:`spelled`) also
    uses in lower case ("Hotel (1967 film)" beside "the hotel"). Such a title is "named" by any text
    that opens a sentence with it or gives a date, so it links nothing."""
    found = SPELLED_WORD.findall(clean_title(title))
    if not found or all(w.isdigit() for w in found):
        return True
    return len(found) == 1 and (found[0] in _CALENDAR or f" {found[0].lower()} " in spelled_text)


# A title of more words is not looked up (``mentioned_names``): long titles are rarely spelled out whole.
MAX_NAME_WORDS = 8


def name_key(title: str) -> str | None:
    """The lookup key of a document's name: its title without the trailing parenthetical, words only,
    case kept (``"Kiss and Tell (1945 film)"`` -> ``"Kiss and Tell"``); ``None`` when the name cannot
    be matched (shorter than ``MIN_TITLE_CHARS``, longer than ``MAX_NAME_WORDS`` words, or it starts
    with a lower-case letter, see :func:`mentioned_names`)."""
    found = SPELLED_WORD.findall(clean_title(title))
    key = " ".join(found)
    if len(key) < MIN_TITLE_CHARS or len(found) > MAX_NAME_WORDS or not _opens_name(found[0]):
        return None
    return key


def mentioned_names(text: str, limit: int = 20_000) -> list[str]:
    """Every run of up to ``MAX_NAME_WORDS`` words of ``text`` that opens with a capital or a digit, as
    :func:`name_key` spells a name, first mention first, at most ``limit``: the keys a text could name a
    document by. Names are proper nouns, so the capital rule loses little and keeps the lookup small."""
    found = SPELLED_WORD.findall(text)
    out: dict[str, None] = {}
    for i, word in enumerate(found):
        if len(out) >= limit:
            break
        if not _opens_name(word):
            continue
        for n in range(1, min(MAX_NAME_WORDS, len(found) - i) + 1):
            key = " ".join(found[i : i + n])
            if len(key) >= MIN_TITLE_CHARS:
                out.setdefault(key, None)
    return list(out)[:limit]


def _opens_name(word: str) -> bool:
    return word[:1].isupper() or word[:1].isdigit()
