"""The name a passage opens with, and whether a near-copy is about another subject than a passage.

Pages cut from one template ("The 2009 Colorado Buffaloes football team represented the University of
Colorado ...", "The 2011 Colorado Buffaloes football team ...", "Solidago speciosa, the showy goldenrod,
is a North American species ...") say nearly the same words about different subjects, and each names
its own subject first. Paraphrases planted for one question (PoisonedRAG) open with the question's own
entities, reworded ("Laleli Mosque and Esma Sultan Mansion, two historical landmarks, ..."). So a
near-copy whose opening name holds a word that neither the passage nor the query uses is about another
subject than a passage that opens with a name too: the planted-copies rule does not count it
(docs/factcheck.md, rule 1).

The test is lexical and cheap on purpose: the index computes :func:`lead_name` for the few copies above
the fact-check's threshold, the fact-check compares it with the passage and query it already holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from services.common.words import NAME_TOKEN

# openers skipped before the name ("The 2011 ...", "In 2010, Kent ...")
_OPENERS = frozenset(
    [
        "the",
        "a",
        "an",
        "in",
        "on",
        "at",
        "by",
        "for",
        "from",
        "during",
        "after",
        "before",
        "since",
        "as",
        "to",
        "with",
        "this",
        "that",
        "these",
        "those",
        "it",
        "its",
        "both",
        "while",
        "although",
        "however",
        "unlike",
        "like",
        "among",
        "between",
        "when",
    ]
)
# lower-case words inside a name ("Battle of Pusan Perimeter", "Laleli Mosque and Esma Sultan Mansion")
_CONNECTORS = frozenset(
    [
        "of",
        "the",
        "and",
        "de",
        "la",
        "le",
        "du",
        "des",
        "von",
        "van",
        "der",
        "den",
        "y",
        "&",
        "di",
        "da",
        "del",
        "for",
        "at",
        "on",
        "upon",
    ]
)
_DASHES = re.compile(r"[\-–—]")
# Only the first words are read: the subject comes first, and a long opening is not a name.
LEAD_CHARS = 240
# the shortest word that matches a longer one by prefix ("Hal" beside "Hall": a typo, not a subject)
_MIN_PREFIX = 3


def _is_name_word(token: str) -> bool:
    return token[0].isupper() or any(ch.isdigit() for ch in token)


def lead_name(text: str) -> str:
    """The name ``text`` opens with: its leading capitalised words and numbers (connectors such as "of"
    inside), after openers such as "The" or "In"; ``""`` when it opens with none, or with a single
    capitalised word that is not a number ("Renowned for ...", "Logistics in ..."): sentence case
    capitalises any first word, so one such word is no evidence of a name."""
    tokens = NAME_TOKEN.findall(text[:LEAD_CHARS])
    i = 0
    while i < len(tokens) and tokens[i].lower() in _OPENERS:
        i += 1
    words: list[str] = []
    while i < len(tokens):
        token = tokens[i]
        if not (_is_name_word(token) or (words and token in _CONNECTORS)):
            break
        words.append(token)
        i += 1
    while words and words[-1] in _CONNECTORS:  # "Laleli Mosque and the ..." ends at "Mosque"
        words.pop()
    names = [w for w in words if w not in _CONNECTORS]
    if len(names) == 1 and not any(ch.isdigit() for ch in names[0]):
        return ""
    return " ".join(words)


def _norm(part: str) -> str:
    """Case, possessive and a plural 's' folded ("Terrier's", "Terriers" -> "terrier")."""
    word = part.lower().replace("’", "'")
    for suffix in ("'s", "'"):
        if word.endswith(suffix):
            word = word[: -len(suffix)]
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _parts(token: str) -> list[str]:
    return [_norm(p) for p in _DASHES.split(token) if p]


def subject_words(texts: Iterable[str]) -> frozenset[str]:
    """Every folded word (and dash-separated part: "2017–18" -> "2017", "18") of ``texts``."""
    return frozenset(p for text in texts for token in NAME_TOKEN.findall(text) for p in _parts(token))


def subject_context(text: str, query: str) -> frozenset[str] | None:
    """The words a near-copy's opening name is checked against (:func:`other_subject`): the
    passage's and the query's; ``None`` when the passage itself opens with no name. A page about a
    named subject names it first, so only such a page can have siblings about other subjects; planted
    text often opens otherwise ("In an unusual historical twist, ..."), and its copies all count."""
    return subject_words((text, query)) if lead_name(text) else None


def _known(part: str, words: frozenset[str]) -> bool:
    if part in words:
        return True
    if len(part) < _MIN_PREFIX:
        return False
    return any(w.startswith(part) or (len(w) >= _MIN_PREFIX and part.startswith(w)) for w in words)


def other_subject(lead: str, words: frozenset[str]) -> str | None:
    """The first word of ``lead`` (a :func:`lead_name`) absent from ``words`` (the passage's and the
    query's :func:`subject_words`), or ``None``: a copy opening with a name the passage and the query
    never use is about another subject."""
    token: str
    for token in NAME_TOKEN.findall(lead):
        if token in _CONNECTORS:
            continue
        if any(not _known(p, words) for p in _parts(token)):
            return token
    return None
