"""Text primitives every detector shares: content terms (stemmed, stop words removed) and sentences.

One tokeniser for all detectors so that "the query's terms" means the same thing in query-copy,
keyword-stuffing and strip-coverage scores.
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer

from services.ingest.sentences import split_sentences

WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)  # a word token (letters/digits, inner apostrophes)

# Function words and question words: they carry no topic, so neither coverage nor stuffing counts them.
STOP_WORDS = frozenset(
    """
    a about above after again against all also am an and any are aren as at be because been before
    being below between both but by can could couldn did didn do does doesn doing don down during
    each etc few for from further had has have having he her here hers herself him himself his how i
    if in into is isn it its itself just many may me might more most much must my myself no nor not
    of off on once one ones only or other our ours ourselves out over own per s same shall she
    should shouldn so some such t than that the their theirs them themselves then there these they
    this those through to too under until up very via was wasn we were weren what when where which
    while who whom why will with won would wouldn you your yours yourself yourselves
    """.split()  # noqa: SIM905  (one readable block, not 150 lines)
)

_stemmer = Stemmer.Stemmer("english")


def words(text: str) -> list[str]:
    """Lower-cased word tokens (letters/digits, inner apostrophes kept)."""
    return [w.lower() for w in WORD.findall(text)]


@lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """The stem :func:`terms` gives a lower-cased word."""
    return str(_stemmer.stemWord(word))


def terms(text: str) -> list[str]:
    """Stemmed content terms in order (stop words and 1-letter tokens dropped)."""
    return [stem(w) for w in words(text) if w not in STOP_WORDS and (len(w) > 1 or w.isdigit())]


def sentences(text: str, max_words: int = 80) -> list[str]:
    """Sentence "strips" of a passage (CRAG's unit): the ingest splitter, long runs cut to ``max_words``."""
    return split_sentences(text, max_words=max_words) if text.strip() else []
