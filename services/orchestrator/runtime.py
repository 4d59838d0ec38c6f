"""Builds every embedded-mode dependency once, from settings, and hands them out.

The gateway, the CLI and the evaluation harness all start from :meth:`Runtime.open`; nothing else
constructs models or indexes. Each stage's backend comes from that stage's factory (``open_index``,
``build_retriever``, ``build_reranker``, ``build_fact_checker``...): with ``remote.retrieval_address``
set (the distributed stack) the index and hybrid retrieval are the retrieval service's, reached over
gRPC through the same protocols (:class:`SearchIndex`, :class:`Retriever`): nothing downstream can tell.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from services.common.settings import RampartSettings
from services.factcheck.checker import FactChecker, build_fact_checker
from services.factcheck.stage import FactCheckStage
from services.ingest.service import IngestService
from services.orchestrator.search import SearchPipeline
from services.rerank.reranker import Reranker, build_reranker
from services.rerank.score_cache import ScoreCache
from services.rerank.stage import RerankStage
from services.retrieval.embedder import Embedder, build_embedder
from services.retrieval.index import SearchIndex, open_index
from services.retrieval.retriever import build_retriever

if TYPE_CHECKING:
    from services.orchestrator.orchestrator import Orchestrator

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: RampartSettings
    embedder: Embedder
    index: SearchIndex
    ingest: IngestService
    search: SearchPipeline
    reranker: Reranker | None = None
    owns_reranker: bool = True  # False when the caller passed one in (it closes it)
    fact_checker: FactChecker | None = None
    _orchestrator: Orchestrator | None = field(default=None, repr=False)

    @property
    def orchestrator(self) -> Orchestrator:
        """The adaptive pipeline (router, chains, CRAG, answers), built on first use: plain search
        needs none of it, and ``rampart serve`` touches it at start-up so a missing model fails early."""
        if self._orchestrator is None:
            from services.orchestrator.assemble import build_orchestrator

            self._orchestrator = build_orchestrator(self.settings, self.search, self.embedder)
        return self._orchestrator

    @classmethod
    def open(
        cls,
        settings: RampartSettings,
        *,
        embedder: Embedder | None = None,
        reranker: Reranker | None = None,
    ) -> Runtime:
        """Build everything; pass ``embedder``/``reranker`` to share already-loaded models (tests, workers)."""
        embedder = embedder or build_embedder(settings)
        owns = reranker is None
        reranker = reranker if reranker is not None else build_reranker(settings)
        index = open_index(settings, embedder.dim, embedder.model_id)
        retriever = build_retriever(settings, index, embedder)
        ingest = IngestService.from_settings(index, embedder, settings)
        cache = ScoreCache(settings.rerank.cache_size) if settings.rerank.cache_size else None
        checker = build_fact_checker(settings, embedder)
        search = SearchPipeline(
            retriever,
            settings.fusion,
            RerankStage(reranker, cache),
            settings.rerank,
            FactCheckStage(checker),
            settings.factcheck,
        )
        log.info(
            "runtime ready",
            extra={
                "embedder": embedder.model_id,
                "reranker": reranker.model_id if reranker else None,
                "fact_checker": checker.model_id if checker else None,
                # a remote index is not asked here: the orchestrator may start before the service
                **(index.stats() if not settings.remote.retrieval_address else {"index": "remote"}),
            },
        )
        return cls(settings, embedder, index, ingest, search, reranker, owns, checker)

    def close(self) -> None:
        if self._orchestrator is not None:
            self._orchestrator.close()
        if self.fact_checker is not None:
            self.fact_checker.close()
        self.index.close()
        self.search.retriever.close()
        if self.reranker is not None and self.owns_reranker:
            self.reranker.close()
