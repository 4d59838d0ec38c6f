"""Keyword-stuffing detector: a few terms repeated far beyond natural prose, to win BM25.

Natural text spreads its vocabulary (on SciFact and HotpotQA no content term takes more than
~10% of a passage's content terms once a passage has 40+ of them). Score rises with the share of the top
term(s) and with the query's terms being the ones repeated; short passages are not judged (their
shares are noisy).
"""

from __future__ import annotations

from collections import Counter

from services.common.words import terms
from services.factcheck.detectors import Signal


def detect_stuffing(query: str, text: str, *, min_terms: int = 30, natural_share: float = 0.12) -> Signal:
    t = terms(text)
    if len(t) < min_terms:
        return Signal.none()
    counts = Counter(t)
    top = counts.most_common(3)
    top_share = sum(c for _, c in top) / len(t)
    distinct = len(counts) / len(t)  # type/token ratio: prose ~0.5-0.8, stuffed text far lower
    q = set(terms(query))
    stuffed_q = [w for w, c in top if w in q and c / len(t) > natural_share]
    # 3 x natural share for the top three terms together, or a collapsed vocabulary, is abnormal
    score = max(0.0, min(1.0, (top_share - 3 * natural_share) / (3 * natural_share)))
    score = max(score, max(0.0, min(1.0, (0.3 - distinct) / 0.2)))
    if stuffed_q and score > 0:
        score = min(1.0, score + 0.25)
    if score <= 0:
        return Signal.none()
    listed = ", ".join(f"{w}×{c}" for w, c in top)
    return Signal(round(score, 4), f"top terms {listed} are {top_share:.0%} of {len(t)} terms")
