"""Query-copy detector: the question itself pasted into the passage (PoisonedRAG's black-box trick).

An attacker who wants a passage retrieved for a question prepends the question to it. Ordinary
documents answer questions; they rarely contain one verbatim. Score = the longest run of the query's
words found contiguously in the passage, as a share of the query's words, counted only when the query
is long enough (>= ``min_words``) for a copy to be deliberate rather than a common phrase.
"""

from __future__ import annotations

from services.common.words import words
from services.factcheck.detectors import Signal


def longest_common_run(a: list[str], b: list[str]) -> tuple[int, int]:
    """(length, start in ``a``) of the longest contiguous word sequence shared by ``a`` and ``b``."""
    if not a or not b:
        return 0, 0
    best, best_end = 0, 0
    prev = [0] * (len(b) + 1)
    for i, wa in enumerate(a, 1):
        cur = [0] * (len(b) + 1)
        for j, wb in enumerate(b, 1):
            if wa == wb:
                cur[j] = prev[j - 1] + 1
                if cur[j] > best:
                    best, best_end = cur[j], i
        prev = cur
    return best, best_end - best


def detect_query_copy(query: str, text: str, *, min_words: int = 6, max_passage_words: int = 2000) -> Signal:
    q = words(query)
    if len(q) < min_words:
        return Signal.none()
    p = words(text)[:max_passage_words]
    run, start = longest_common_run(q, p)
    if run < min_words:
        return Signal(0.0, "")
    share = run / len(q)
    return Signal(
        round(share, 4), f"{run} of the query's {len(q)} words copied: {' '.join(q[start : start + run])!r}"
    )
