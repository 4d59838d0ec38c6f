"""Settings of CRAG's corrective retrieval: :class:`GradingSettings` (``grading``), read by the
grader (which evaluator, and the thresholds on its score; the evaluator's fitted weights are a model
artifact, :mod:`.evaluator`), the knowledge refiner (``strips`` and the rest) and the corrective
step (``research_primary``); :class:`SecondarySourceSettings` (``grading.secondary``), read by
:func:`~services.orchestrator.corrective.secondary.build_secondary`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator


class SecondarySourceSettings(BaseModel):
    """Where CRAG's corrective search goes when the primary retrieval is graded Incorrect."""

    kind: Literal["none", "tenant", "http"] = Field(
        default="none",
        description="none: no fallback; tenant: another tenant's corpus in this index; http: a federated "
        "search endpoint",
    )
    tenant: str | None = Field(default=None, description="Corpus tenant searched when kind=tenant")
    url: str | None = Field(default=None, description="Search endpoint when kind=http")
    api_key: SecretStr | None = Field(default=None, description="Bearer token for kind=http; never logged")
    timeout_ms: int = Field(default=2000, ge=10, le=60_000, description="Past it, primary results only")
    top_k: int = Field(default=5, ge=1, le=50, description="Results asked of the secondary source")
    retries: int = Field(
        default=1, ge=0, le=5, description="kind=http: retries on connection errors and HTTP 5xx only"
    )
    max_text_chars: int = Field(
        default=4000, ge=100, le=100_000, description="kind=http: longer result texts are cut to this"
    )


class GradingSettings(BaseModel):
    """CRAG's retrieval evaluator and corrective actions (papers.md §3)."""

    enabled: bool = Field(default=True, description="Grade each retrieved set and act on the grade")
    # Thresholds: the operating point `rampart tune grading` chose for the shipped evaluator (its manifest).
    correct_threshold: float = Field(
        default=0.78, ge=0.0, le=1.0, description="Score at or above: Correct (tuned on dev data, CRAG: 0.7)"
    )
    incorrect_threshold: float = Field(
        default=0.45, ge=0.0, le=1.0, description="Score below: Incorrect (tuned on dev data, CRAG: 0.5)"
    )
    depth: int = Field(default=5, ge=1, le=50, description="Top results the evaluator reads")
    # Off: the re-search costs a call and changed no figure (docs/journal/2026-11-23-chain-and-routed-held-out.md).
    research_primary: bool = Field(
        default=False,
        description="Incorrect with no secondary source: search the primary corpus once more with the "
        "rewritten query (one more retrieval call)",
    )
    evaluator_dir: Path | None = Field(
        default=None,
        description="Folder with the logistic evaluator (weights.json, manifest.json; written by `rampart "
        "tune grading --out`); unset = the shipped one (services/models/artifacts/grading)",
    )
    weights: dict[str, float] | None = Field(
        default=None,
        description="Logistic evaluator: feature -> weight (features in docs/grading.md), replacing the "
        "evaluator's; unset = the evaluator's (grading.evaluator_dir)",
    )
    bias: float | None = Field(
        default=None, description="Logistic evaluator's intercept, replacing the evaluator's; unset = its own"
    )
    # Refinement: chosen with `rampart tune refinement` (figures: docs/grading.md, "Choosing the rule").
    strips: int = Field(
        default=8,
        ge=1,
        le=50,
        description="Refinement: strips kept in all (each passage's best and opening strips are kept anyway)",
    )
    strip_chars: int = Field(
        default=2000, ge=100, le=20_000, description="Refinement: most characters of strips kept"
    )
    min_strip_score: float = Field(
        default=0.2, ge=0.0, le=1.0, description="Refinement: other strips scoring below are not added"
    )
    lexical_weight: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Refinement: weight of term coverage vs. embedding cosine"
    )
    secondary: SecondarySourceSettings = SecondarySourceSettings()

    @model_validator(mode="after")
    def _order(self) -> GradingSettings:
        if self.incorrect_threshold > self.correct_threshold:
            raise ValueError(
                f"grading.incorrect_threshold={self.incorrect_threshold} exceeds "
                f"correct_threshold={self.correct_threshold}; lower it"
            )
        return self
