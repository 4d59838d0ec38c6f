"""The ``FactChecker`` protocol and its one factory.

Implementations: :class:`~services.factcheck.in_process.InProcessFactChecker` (embedded default, a
thread pool) and :class:`~services.factcheck.celery_checker.CeleryFactChecker` (Redis-backed Celery
workers, batched tasks of passages). Both gather per-document evidence with the same functions and decide
with the same classifier, so their verdicts are identical for the same inputs (the contract suite in
``tests/contracts/fact_checker.py`` holds them to that).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from services.common.verdicts import Judgement
from services.factcheck.evidence import CheckInput

if TYPE_CHECKING:
    from pathlib import Path

    from services.common.config import LlmSettings
    from services.factcheck.config import FactCheckSettings
    from services.factcheck.model_conflicts import ModelConflicts
    from services.retrieval.embedder import Embedder


@dataclass
class CheckOutcome:
    """Judgements in input order, or ``unverified`` with the reason when they could not be had in time."""

    judgements: list[Judgement] = field(default_factory=list)
    unverified: bool = False
    reason: str | None = None


@runtime_checkable
class FactChecker(Protocol):
    @property
    def model_id(self) -> str:
        """Identity of everything that changes verdicts (evidence recipe, embedder, LLM judge,
        contradiction model)."""
        ...

    def check(
        self,
        query: str,
        items: Sequence[CheckInput],
        *,
        deadline_s: float,
        context: Sequence[CheckInput] = (),
        linked: bool = True,
    ) -> CheckOutcome:
        """Judge ``items`` for ``query`` within ``deadline_s`` seconds; never raises for a slow or
        absent backend (returns ``unverified`` instead), raises ``RampartError`` for bad input.
        ``context``: passages ranked below ``items``, read as near-duplicate peers, not judged.
        ``linked``: the passages come from a corpus whose documents name each other by title, so the
        rules that read titles apply (``FactCheckSettings.for_corpus``); the search pipeline passes its
        tenant's corpus profile (docs/corpus-profiles.md)."""
        ...

    def check_ready(self) -> None:
        """Raise ``RampartError(UNAVAILABLE)`` unless verdicts can be produced now (/readyz)."""
        ...

    def close(self) -> None: ...


def build_fact_checker(
    settings: FactCheckSettings, embedder: Embedder, *, llm: LlmSettings, models_dir: Path
) -> FactChecker | None:
    """The configured fact-checker, or ``None`` when ``factcheck.backend`` is ``none``.

    ``llm``: the endpoint of the optional judge (``factcheck.use_llm``); ``models_dir``: where the
    contradiction classifier is installed (read only when ``factcheck.contradiction_pairs`` > 0)."""
    if settings.backend == "none":
        return None
    conflicts = build_conflicts(settings, models_dir)
    if settings.backend == "celery":
        from services.factcheck.celery_checker import CeleryFactChecker

        return CeleryFactChecker.from_settings(settings, llm, embedder, conflicts)
    from services.factcheck.in_process import InProcessFactChecker
    from services.factcheck.llm_judge import build_judge

    return InProcessFactChecker(embedder, settings, judge=build_judge(settings, llm), conflicts=conflicts)


def build_conflicts(settings: FactCheckSettings, models_dir: Path) -> ModelConflicts | None:
    """The contradiction classifier over passage pairs, unless disabled or given no pairs to read."""
    from services.factcheck.contradiction import build_contradiction_model
    from services.factcheck.model_conflicts import ModelConflicts

    if settings.contradiction_pairs <= 0:
        return None
    model = build_contradiction_model(settings, models_dir)
    return ModelConflicts(model, max_pairs=settings.contradiction_pairs) if model else None
