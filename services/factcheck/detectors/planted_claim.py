"""Planted-claim detector: a passage that asserts what a group of flagged planted copies asserts.

PoisonedRAG writes several paraphrases of one false claim. :mod:`planted_copies` catches the ones with
``copy_min_docs`` close copies in the corpus; a looser paraphrase (claim cosine 0.65-0.8 to its
siblings) escapes it although it says the same thing. What unites a planted group is its claim: the
words every flagged member uses that the query does not ask about -- the planted answer ("Mrs.
Tiggy-Winkle", "Springfield", "City Mayor"). A passage close to at least ``min_group`` flagged members
that uses every one of those words asserts their claim. A genuine paragraph on the subject lies about
as close to the group (that is why DBSCAN-style border members swept up genuine answers,
docs/benchmarks.md), but it gives its own answer, not the planted one.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.factcheck.detectors import Signal
from services.factcheck.text import WORD, stem, words


def planted_claim(
    query_terms: frozenset[str],
    passage: str,
    passage_terms: frozenset[str],
    group: Sequence[tuple[float, frozenset[str], int]],
    *,
    min_group: int,
    length_ratio: float = 0.0,
) -> Signal:
    """``group``: (cosine to this passage, content terms, words) of each flagged member close to it.
    Score = the cosine to the closest member when at least ``min_group`` are given, the terms all of
    them share beyond the query's are non-empty and all in ``passage_terms``, and (``length_ratio`` >
    0) the passage is at most that many times as long as the longest member."""
    if min_group < 1 or len(group) < min_group:
        return Signal.none()
    if length_ratio > 0 and len(words(passage)) > length_ratio * max(n for *_, n in group):
        return Signal.none()
    claim = frozenset.intersection(*(t for _, t, _ in group)) - query_terms
    if not claim or not claim <= passage_terms:
        return Signal.none()
    shown = sorted({w for w in WORD.findall(passage) if stem(w.lower()) in claim})[:6]
    closest = max(c for c, *_ in group)
    return Signal(
        round(min(1.0, max(0.0, closest)), 4),
        f"asserts what {len(group)} passages flagged as planted assert "
        f"({', '.join(repr(w) for w in shown)}; none of it asked by the query; closest cosine {closest:.2f})",
    )
