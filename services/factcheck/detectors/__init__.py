"""Small, explainable detectors. Each returns a :class:`Signal`: a score in [0, 1] and the evidence a
human can check (the matched phrase, the overlapping terms). The classifier combines them; none of
them decides alone what to do with a document."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Signal:
    score: float
    evidence: str = ""

    @staticmethod
    def none() -> Signal:
        return Signal(0.0, "")
