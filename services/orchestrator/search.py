"""The search pipeline: today hybrid retrieval; rerank, fact-check and routing plug in here.

It is the one place that turns a search request into results, used in-process by the embedded
gateway and (later) inside the Ray Serve deployment.
"""

from __future__ import annotations

from typing import Any

from services.common.settings import FusionSettings
from services.common.types import Principal
from services.retrieval.hybrid import HybridRetriever, SearchOutcome, SearchParams


class SearchPipeline:
    def __init__(self, retriever: HybridRetriever, defaults: FusionSettings) -> None:
        self.retriever = retriever
        self.defaults = defaults

    def params(self, *, top_k: int, **overrides: Any) -> SearchParams:
        """Request parameters: settings' defaults, overridden per request (see SearchParams.from_settings)."""
        return SearchParams.from_settings(self.defaults, top_k=top_k, **overrides)

    def search(self, query: str, principal: Principal, params: SearchParams) -> SearchOutcome:
        return self.retriever.search(query, principal, params)
