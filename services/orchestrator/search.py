"""The search pipeline: today hybrid retrieval; rerank, fact-check and routing plug in here.

It is the one place that turns a search request into results, used in-process by the embedded
gateway and (later) inside the Ray Serve deployment.
"""

from __future__ import annotations

from services.common.settings import FusionSettings
from services.common.types import FusionMethod, Principal, SearchFilters
from services.retrieval.fusion import Bounds
from services.retrieval.hybrid import HybridRetriever, SearchOutcome, SearchParams


class SearchPipeline:
    def __init__(self, retriever: HybridRetriever, defaults: FusionSettings) -> None:
        self.retriever = retriever
        self.defaults = defaults

    def params(
        self,
        *,
        top_k: int,
        method: FusionMethod | None = None,
        weights: dict[str, float] | None = None,
        rrf_k: int | None = None,
        candidates: int | None = None,
        fill_missing: bool | None = None,
        bounds: dict[str, Bounds] | None = None,
        filters: SearchFilters | None = None,
    ) -> SearchParams:
        return SearchParams.from_settings(
            self.defaults,
            top_k=top_k,
            method=method,
            weights=weights,
            rrf_k=rrf_k,
            candidates=candidates,
            fill_missing=fill_missing,
            bounds=bounds,
            filters=filters,
        )

    def search(self, query: str, principal: Principal, params: SearchParams) -> SearchOutcome:
        return self.retriever.search(query, principal, params)
