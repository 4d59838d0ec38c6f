"""Builds every embedded-mode dependency once, from settings, and hands them out.

The gateway, the CLI and the evaluation harness all start from :meth:`Runtime.open`; nothing else
constructs models or indexes. Later issues add reranker, fact-checker and router here, each from its
own factory.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from services.common.settings import RampartSettings
from services.ingest.service import IngestService
from services.orchestrator.search import SearchPipeline
from services.retrieval.embedder import Embedder, build_embedder
from services.retrieval.hybrid import HybridRetriever
from services.retrieval.index import SearchIndex, open_index

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    settings: RampartSettings
    embedder: Embedder
    index: SearchIndex
    ingest: IngestService
    search: SearchPipeline

    @classmethod
    def open(cls, settings: RampartSettings, *, embedder: Embedder | None = None) -> Runtime:
        """Build everything; pass ``embedder`` to share an already-loaded model (tests, workers)."""
        embedder = embedder or build_embedder(settings)
        index = open_index(settings, embedder.dim, embedder.model_id)
        ingest = IngestService.from_settings(index, embedder, settings)
        search = SearchPipeline(HybridRetriever(index, embedder), settings.fusion)
        log.info("runtime ready", extra={"embedder": embedder.model_id, **index.stats()})
        return cls(settings, embedder, index, ingest, search)

    def close(self) -> None:
        self.index.close()
