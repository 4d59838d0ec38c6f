"""CRAG's retrieval evaluator (papers.md §3): how likely the reranked set holds what the query asks.

CRAG fine-tunes a T5 evaluator; Rampart already owns a calibrated cross-encoder, so the evaluator is a
small logistic model over cheap features of the set it is given (no model call of its own):

- ``p_max`` / ``p_mean``: the reranker logit of the top ``depth`` hits turned into P(relevant) by the
  fact-check's Platt calibration (``factcheck.calibration``) — their best and their mean;
- ``coverage``: the best sentence strip's share of the query's content terms (the fact-check's
  ``strip_coverage``: one tokeniser for "the query's terms" everywhere);
- ``agreement``: share of the top hits that BM25 *and* dense retrieval both rank in their own top
  ``AGREE_RANK`` (retrievers that agree are rarely both wrong);
- ``dense_max``: the best dense cosine among them.

Without reranker scores (rerank off or degraded) the dense cosine stands in for P(relevant) and
``reranked`` is 0 in the features: the grade is then rougher, and says so. Weights and bias are a
model artifact (:mod:`.evaluator`), fitted by ``rampart tune grading`` on dev data (docs/grading.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from services.common.types import ScoredChunk
from services.factcheck.config import FactCheckSettings
from services.factcheck.evidence import bounded_text, strip_coverage
from services.factcheck.rules.relevance import relevance_probability
from services.orchestrator.corrective.config import GradingSettings
from services.orchestrator.corrective.evaluator import FEATURES, build_evaluator
from services.orchestrator.plan import Grade
from services.retrieval.hybrid import SearchOutcome

AGREE_RANK = 10  # "both retrievers rank it high": within each one's own top 10


@dataclass(frozen=True)
class GradeResult:
    """The evaluator's verdict on one retrieved set; ``features`` go on the span and the response."""

    grade: Grade
    score: float
    features: dict[str, float] = field(default_factory=dict)


def features(
    query: str, hits: list[ScoredChunk], calibration: tuple[float, float], depth: int
) -> dict[str, float]:
    """The evaluator's inputs for the top ``depth`` hits (all in [0, 1]; an empty set is all zeros)."""
    top = hits[:depth]
    if not top:
        return {name: 0.0 for name in FEATURES} | {"reranked": 0.0}
    dense = [_clip(h.scores.get("dense")) for h in top]
    logits = [h.scores.get("rerank") for h in top]
    reranked = all(v is not None for v in logits)
    probs = (
        [relevance_probability(v, calibration) or 0.0 for v in logits]
        if reranked
        else list(dense)  # the cosine stands in for P(relevant): rougher, flagged by reranked = 0
    )
    coverage = max(strip_coverage(query, h.chunk.title, bounded_text(h.chunk.text))[0] for h in top)
    agree = sum(_both_high(h.ranks) for h in top) / len(top)
    return {
        "p_max": max(probs),
        "p_mean": sum(probs) / len(probs),
        "coverage": coverage,
        "agreement": agree,
        "dense_max": max(dense),
        "reranked": 1.0 if reranked else 0.0,
    }


class RetrievalGrader:
    """Grades a reranked set Correct / Ambiguous / Incorrect with the thresholds in settings."""

    def __init__(self, settings: GradingSettings, factcheck: FactCheckSettings) -> None:
        self.settings = settings
        self.calibration = factcheck.calibration
        self.evaluator = build_evaluator(settings)  # a bad artifact or weight fails at start-up

    def score(self, query: str, hits: list[ScoredChunk]) -> tuple[float, dict[str, float]]:
        values = features(query, hits, self.calibration, self.settings.depth)
        return self.evaluator.score(values), values

    def grade(self, query: str, outcome: SearchOutcome) -> GradeResult:
        score, values = self.score(query, outcome.hits)
        return GradeResult(
            grade_of(score, self.settings), round(score, 4), {k: round(v, 4) for k, v in values.items()}
        )


def grade_of(score: float, settings: GradingSettings) -> Grade:
    """CRAG's two thresholds: at or above ``correct_threshold`` Correct, below ``incorrect_threshold``
    Incorrect, Ambiguous between."""
    if score >= settings.correct_threshold:
        return Grade.CORRECT
    if score < settings.incorrect_threshold:
        return Grade.INCORRECT
    return Grade.AMBIGUOUS


def _clip(value: float | None) -> float:
    return 0.0 if value is None or math.isnan(value) else max(0.0, min(1.0, float(value)))


def _both_high(ranks: Mapping[str, int | None]) -> bool:
    bm25, dense = ranks.get("bm25"), ranks.get("dense")
    return bm25 is not None and dense is not None and bm25 <= AGREE_RANK and dense <= AGREE_RANK
