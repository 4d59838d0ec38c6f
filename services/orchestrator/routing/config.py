"""Settings of query routing: :class:`RoutingSettings` (``routing``), read by
:func:`~services.orchestrator.routing.router.build_router` (the model) and by the orchestrator, which
follows the :class:`RoutePlan` of the routed complexity (fusion weights, context size, chain steps).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, model_validator


class RoutePlan(BaseModel):
    """Retrieval parameters of one complexity level (HyPA's table, papers.md §2)."""

    context_k: int = Field(ge=1, le=100, description="Results handed to the answer (HyPA's top-k)")
    candidates: int = Field(default=300, ge=1, le=2000, description="Per-retriever depth before fusion")
    bm25_weight: float = Field(ge=0.0, le=1.0, description="BM25's fusion weight")
    dense_weight: float = Field(ge=0.0, le=1.0, description="Dense retrieval's fusion weight")
    kg_weight: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Knowledge graph's weight; no KG is indexed yet, so it is renormalised away",
    )
    kg_depth: int = Field(default=1, ge=0, le=5, description="KG expansion hops (used once a KG exists)")
    chain_steps: int | None = Field(
        default=None,
        ge=1,
        le=10,
        description="Retrieval steps at most for a Complex query of this complexity; unset = chain.max_steps",
    )

    @model_validator(mode="after")
    def _sum(self) -> RoutePlan:
        total = self.bm25_weight + self.dense_weight + self.kg_weight
        if abs(total - 1.0) > 1e-6:
            raise ValueError(
                f"route plan weights bm25={self.bm25_weight} dense={self.dense_weight} kg={self.kg_weight} "
                f"sum to {total:.3f}; they must sum to 1"
            )
        return self


def _hypa_plans() -> dict[str, RoutePlan]:
    return {
        "low": RoutePlan(context_k=3, bm25_weight=0.5, dense_weight=0.4, kg_weight=0.1, kg_depth=1),
        # Medium = two-entity questions: one hop after the first search suffices (figures: docs/chain.md).
        "medium": RoutePlan(
            context_k=5, bm25_weight=0.4, dense_weight=0.4, kg_weight=0.2, kg_depth=2, chain_steps=2
        ),
        # High = multi-step questions; BM25:dense tuned for the chain's first step (grid: docs/routing.md).
        "high": RoutePlan(context_k=10, bm25_weight=0.7, dense_weight=0.3, kg_weight=0.0, kg_depth=3),
    }


class RoutingSettings(BaseModel):
    """AdaptiveRAG routing + HyPA parameters (docs/orchestration.md)."""

    enabled: bool = Field(default=True, description="Classify each query and follow its route")
    model_dir: Path | None = Field(
        default=None,
        description="Trained query router (`rampart train router`); default <models_dir>/router",
    )
    min_confidence: float = Field(
        default=0.6, ge=0.0, le=1.0, description="Below this type confidence, route as Conversational"
    )
    plans: dict[str, RoutePlan] = Field(
        default_factory=_hypa_plans,
        description=(
            "Retrieval parameters per complexity (low/medium/high); HyPA's table by default, the high "
            "row's BM25:dense split tuned on the HotpotQA-500 train half (0.7:0.3)"
        ),
    )

    @model_validator(mode="after")
    def _levels(self) -> RoutingSettings:
        missing = {"low", "medium", "high"} - set(self.plans)
        if missing:
            raise ValueError(f"routing.plans lacks {sorted(missing)}; give low, medium and high")
        return self

    def resolve_model_dir(self, models_dir: Path) -> Path:
        """``model_dir``, or the folder ``rampart models build`` installs the router in."""
        return self.model_dir or models_dir / "router"
