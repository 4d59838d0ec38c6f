"""Pairwise contradiction between retrieved passages, read by the trained classifier.

The classifier was trained on (evidence, claim) pairs: a claim is one statement. A passage's claim
about the query is its best strip (the sentences that cover the query's terms most, recorded in the
evidence notes), so a pair of passages (a, b) is scored twice — a's text against b's strip and b's
text against a's strip — and the conflict is the larger P(CONTRADICT). Scoring every pair of ten
passages would be 90 model calls (~1 s on two cores): only the ``max_pairs`` most similar pairs are
scored, since passages that contradict each other are about the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from services.factcheck.contradiction import CONTRADICT, ContradictionModel
from services.factcheck.detectors import Signal


@dataclass(frozen=True)
class Side:
    """One passage of a pair: its text (the evidence) and its best strip (its claim)."""

    text: str
    claim: str


class ModelConflicts:
    def __init__(self, model: ContradictionModel, *, max_pairs: int) -> None:
        self.model = model
        self.max_pairs = max_pairs

    @property
    def model_id(self) -> str:
        return self.model.model_id

    def __call__(self, pairs: Sequence[tuple[Side, Side]]) -> list[Signal]:
        """One signal per pair (callers pass at most ``max_pairs``, most similar first)."""
        rows: list[tuple[str, str]] = []
        for a, b in pairs:
            rows += [(a.text, b.claim or b.text), (b.text, a.claim or a.text)]
        if not rows:
            return []
        probs = self.model.predict(rows)[:, CONTRADICT]
        out = []
        for k, (a, b) in enumerate(pairs):
            ab, ba = float(probs[2 * k]), float(probs[2 * k + 1])
            if ab >= ba:
                why = f"model: P(contradict) = {ab:.2f} for {_short(b.claim or b.text)!r}"
            else:
                why = f"model: P(contradict) = {ba:.2f} for {_short(a.claim or a.text)!r}"
            out.append(Signal(round(max(ab, ba), 4), why))
        return out


def _short(text: str, n: int = 100) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
