"""The search pipeline: hybrid retrieval, then reranking; fact-check and routing plug in here.

It is the one place that turns a search request into results, used in-process by the embedded
gateway, by ``rampart eval`` (so figures measure this code) and (later) inside the Ray Serve deployment.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from services.common.settings import FusionSettings, RerankSettings
from services.common.types import Principal
from services.rerank.stage import Mode, RerankStage
from services.retrieval.hybrid import HybridRetriever, SearchOutcome, SearchParams


@dataclass(frozen=True)
class RerankOptions:
    """Per-request rerank knobs; build with :meth:`SearchPipeline.rerank_options`."""

    enabled: bool
    depth: int
    mode: Mode
    weight: float


class SearchPipeline:
    def __init__(
        self,
        retriever: HybridRetriever,
        defaults: FusionSettings,
        rerank: RerankStage | None = None,
        rerank_defaults: RerankSettings | None = None,
    ) -> None:
        self.retriever = retriever
        self.defaults = defaults
        self.rerank = rerank or RerankStage(None)
        self.rerank_defaults = rerank_defaults or RerankSettings()

    def params(self, *, top_k: int, **overrides: Any) -> SearchParams:
        """Request parameters: settings' defaults, overridden per request (see SearchParams.from_settings)."""
        return SearchParams.from_settings(self.defaults, top_k=top_k, **overrides)

    def rerank_options(
        self,
        *,
        enabled: bool | None = None,
        depth: int | None = None,
        mode: Mode | None = None,
        weight: float | None = None,
    ) -> RerankOptions:
        """Settings' rerank defaults overridden per request; always off when no reranker is configured."""
        d = self.rerank_defaults
        return RerankOptions(
            enabled=self.rerank.enabled and (enabled if enabled is not None else d.enabled),
            depth=depth if depth is not None else d.depth,
            mode=mode or d.mode,
            weight=weight if weight is not None else d.weight,
        )

    def search(
        self, query: str, principal: Principal, params: SearchParams, rerank: RerankOptions | None = None
    ) -> SearchOutcome:
        opts = rerank or self.rerank_options()
        if not opts.enabled:
            return self.retriever.search(query, principal, params)
        wanted = params.top_k
        outcome = self.retriever.search(query, principal, replace(params, top_k=max(wanted, opts.depth)))
        result = self.rerank.apply(query, outcome.hits, depth=opts.depth, mode=opts.mode, weight=opts.weight)
        outcome.hits = result.hits[:wanted]
        outcome.timings_ms["rerank"] = result.ms
        outcome.candidates["reranked"] = result.reranked
        outcome.degraded += result.degraded
        return outcome
