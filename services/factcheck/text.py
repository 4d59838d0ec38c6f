"""Sentence strips, the unit the fact-check's coverage and claims read (CRAG's unit).

Words, terms and stop words are :mod:`services.common.words`: one tokeniser for all detectors, so that
"the query's terms" means the same thing in query-copy, keyword-stuffing and strip-coverage scores.
"""

from __future__ import annotations

from services.ingest.sentences import split_sentences


def sentences(text: str, max_words: int = 80) -> list[str]:
    """Sentence "strips" of a passage (CRAG's unit): the ingest splitter, long runs cut to ``max_words``."""
    return split_sentences(text, max_words=max_words) if text.strip() else []
