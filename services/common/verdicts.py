"""The four verdicts and what a judged document carries back to the caller.

Kept apart from the checker code so the gateway schemas, the Celery task payloads and the evaluation
share one definition: a verdict travels as JSON between processes and must round-trip exactly.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, Field


class Verdict(StrEnum):
    RELEVANT = "relevant"
    IRRELEVANT = "irrelevant"
    ADVERSARIAL = "adversarial"
    COUNTERFACTUAL = "counterfactual"


class Judgement(BaseModel):
    """One document's verdict: ``score`` is the confidence in [0, 1], ``reason`` is for a human."""

    chunk_id: str
    doc_id: str
    verdict: Verdict
    score: float = Field(ge=0.0, le=1.0)
    reason: str
    signals: dict[str, float] = Field(
        default_factory=dict, description="Detector scores behind the verdict (for audits and tuning)"
    )
