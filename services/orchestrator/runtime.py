"""Builds every embedded-mode dependency once, from settings, and hands them out.

The gateway, the CLI and the evaluation harness all start from :meth:`Runtime.open`; nothing else
constructs models or indexes. Each stage's backend comes from that stage's factory (``open_index``,
``build_retriever``, ``build_reranker``, ``build_fact_checker``...): with ``remote.retrieval_address``
set (the distributed stack) the index and hybrid retrieval are the retrieval service's, reached over
gRPC through the same protocols (:class:`SearchIndex`, :class:`Retriever`): nothing downstream can tell.

Evaluation and tuning commands measure this same runtime; what they change about it (an index of
their own, a stage left out, another score-cache size) is a :class:`Variant`, and only that.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

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


@dataclass(frozen=True)
class Variant:
    """How an evaluation or tuning command's runtime differs from the served one; the rest comes from
    the settings, so a backend switch there (the index, ``rerank.backend``, ``factcheck.backend``)
    reaches every command.

    ``data_dir``: the index lives there (an evaluation cache) and is this process's own even when
    ``remote.retrieval_address`` is set: a corpus is measured on an index of its own, never written
    into the retrieval service's, which holds users' documents. ``rerank``/``factcheck`` ``False``:
    that stage is left out and nothing is loaded for it (a per-request switch is
    :meth:`SearchPipeline.rerank_options` / :meth:`SearchPipeline.factcheck_options`).
    ``rerank_cache``: the score cache's size (0 = none) instead of ``rerank.cache_size``.
    """

    data_dir: Path | None = None
    rerank: bool = True
    factcheck: bool = True
    rerank_cache: int | None = None

    def apply(self, settings: RampartSettings) -> RampartSettings:
        """``settings`` as this variant's runtime sees them (its orchestrator included)."""
        update: dict[str, Any] = {}
        if self.data_dir is not None:
            update["data_dir"] = self.data_dir
            update["remote"] = settings.remote.model_copy(update={"retrieval_address": None})
        rerank: dict[str, Any] = {}
        if not self.rerank:
            rerank["backend"] = "none"
        if self.rerank_cache is not None:
            rerank["cache_size"] = self.rerank_cache
        if rerank:
            update["rerank"] = settings.rerank.model_copy(update=rerank)
        if not self.factcheck:
            update["factcheck"] = settings.factcheck.model_copy(update={"backend": "none"})
        return settings.model_copy(update=update)


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
        variant: Variant | None = None,
    ) -> Runtime:
        """Build everything; pass ``embedder``/``reranker`` to share already-loaded models (tests,
        workers, an evaluation over several indexes), ``variant`` for what an evaluation changes."""
        if variant is not None:
            if reranker is not None and not variant.rerank:
                raise ValueError(
                    "a reranker was passed to a runtime variant without reranking (rerank=False)"
                )
            settings = variant.apply(settings)
        embedder = embedder or build_embedder(settings.embedding, settings.models_dir)
        owns = reranker is None
        reranker = reranker if reranker is not None else build_reranker(settings.rerank, settings.models_dir)
        index = open_index(settings, embedder.dim, embedder.model_id)
        retriever = build_retriever(settings, index, embedder)
        ingest = IngestService.from_settings(
            index,
            embedder,
            settings.chunking,
            max_document_bytes=settings.gateway.max_document_bytes,
            claim_vectors=settings.index.claim_vectors,
            parsing=settings.parsing,
            graph=settings.graph,
        )
        cache = ScoreCache(settings.rerank.cache_size) if settings.rerank.cache_size else None
        checker = build_fact_checker(
            settings.factcheck, embedder, llm=settings.llm, models_dir=settings.models_dir
        )
        search = SearchPipeline(
            retriever,
            settings.fusion,
            RerankStage(reranker, cache),
            settings.rerank,
            FactCheckStage(checker),
            settings.factcheck,
            settings.corpus,
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

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._orchestrator is not None:
            self._orchestrator.close()
        if self.fact_checker is not None:
            self.fact_checker.close()
        self.ingest.close()
        self.index.close()
        self.search.retriever.close()
        if self.reranker is not None and self.owns_reranker:
            self.reranker.close()
