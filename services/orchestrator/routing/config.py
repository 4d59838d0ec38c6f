"""Settings of query routing: :class:`RoutingSettings` (``routing``), read by
:func:`~services.orchestrator.routing.router.build_router` (the model) and by the orchestrator, which
follows the :class:`RoutePlan` of the routed complexity (fusion weights, context size, chain steps).

The plans are fitted values, not literals here: they are read from a versioned artifact, the shipped
``services/models/artifacts/routing/plans.json`` (HyPA's table with the tuned high row; its manifest and
card say where each value comes from) or the one ``routing.plans_dir`` names. The file is read by path,
not imported, so this module stays a leaf every layer may import.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, model_validator

from services.common.artifact_json import read_table
from services.retrieval.graph.config import MAX_GRAPH_DEPTH

PLANS_FILE = "plans.json"
PLANS_FORMAT = "rampart-route-plans-v1"
SHIPPED_PLANS_DIR = Path(__file__).resolve().parents[2] / "models" / "artifacts" / "routing"
LEVELS: tuple[str, ...] = ("low", "medium", "high")
_REFIT = "rewrite it with `rampart tune routing --out DIR`, or unset RAMPART_ROUTING__PLANS_DIR"


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
        description="Knowledge graph's fusion weight (docs/graph.md); dropped for a query that names nothing "
        "the graph knows",
    )
    kg_depth: int = Field(
        default=1, ge=0, le=MAX_GRAPH_DEPTH, description="Entity -> passage hops of the graph's walk (0 = 1)"
    )
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


@lru_cache(maxsize=16)
def read_plans(path: Path) -> tuple[tuple[str, RoutePlan], ...]:
    """The checked plans of a ``plans.json``, read once per path (:func:`load_plans` hands out copies)."""
    plans = read_table(path, what="route plans", fmt=PLANS_FORMAT, table="plans", keys=LEVELS, fix=_REFIT)
    checked = []
    for level in LEVELS:
        try:
            checked.append((level, RoutePlan.model_validate(plans[level])))
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"]) or "the plan"
            raise ValueError(
                f"route plans {path}: {level}: {where} is invalid ({error['msg']}); {_REFIT}"
            ) from None
    return tuple(checked)


def load_plans(path: Path) -> dict[str, RoutePlan]:
    """The route plans in a ``plans.json`` (read and checked once per path; fresh copies each call, so no
    two settings share a plan), each checked as a :class:`RoutePlan`: a file that is missing, malformed
    or out of range fails here, naming the file, the level, the field and the fix, instead of
    surfacing as an odd retrieval later."""
    return {level: plan.model_copy() for level, plan in read_plans(path)}


def _shipped_plans() -> dict[str, RoutePlan]:
    """Default of ``routing.plans``: the shipped artifact's table."""
    return load_plans(SHIPPED_PLANS_DIR / PLANS_FILE)


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
        default_factory=_shipped_plans,
        description=(
            "Retrieval parameters per complexity (low/medium/high); HyPA's table by default (context "
            "size, KG share and depth, chain steps), with BM25 and dense at equal shares in every row "
            "(the shipped artifact's card says why)"
        ),
    )
    plans_dir: Path | None = Field(
        default=None,
        description="Folder with fitted route plans (plans.json, manifest.json, MODEL_CARD.md; written by "
        "`rampart tune routing --out`) that replace the default `plans`; `plans` set explicitly still "
        "wins; unset = the shipped ones (services/models/artifacts/routing)",
    )

    @model_validator(mode="before")
    @classmethod
    def _fill_from_plans_dir(cls, data: Any) -> Any:
        """With ``plans_dir`` and no explicit ``plans``, the plans come from that folder (the shipped
        ones fill them otherwise, through the field's default factory)."""
        if isinstance(data, dict) and data.get("plans_dir") is not None and "plans" not in data:
            return {**data, "plans": load_plans(Path(data["plans_dir"]) / PLANS_FILE)}
        return data

    @model_validator(mode="after")
    def _levels(self) -> RoutingSettings:
        missing = {"low", "medium", "high"} - set(self.plans)
        if missing:
            raise ValueError(f"routing.plans lacks {sorted(missing)}; give low, medium and high")
        return self

    def resolve_model_dir(self, models_dir: Path) -> Path:
        """``model_dir``, or the folder ``rampart models build`` installs the router in."""
        return self.model_dir or models_dir / "router"
