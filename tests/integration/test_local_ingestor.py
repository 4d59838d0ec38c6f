"""``LocalIngestor`` (embedded mode: ingest in this process on the local index) under the
``Ingestor`` contract."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.ingest.ingestor import Ingestor, LocalIngestor
from services.ingest.service import IngestService
from services.retrieval.embedder import Embedder
from services.retrieval.index import open_index
from tests.contracts.ingestor import IngestorContract, contract_settings


class TestLocalIngestor(IngestorContract):
    @pytest.fixture(scope="class")
    @classmethod
    def ingestor(
        cls, tmp_path_factory: pytest.TempPathFactory, models_dir: Path, embedder: Embedder
    ) -> Iterator[Ingestor]:
        settings = contract_settings(tmp_path_factory.mktemp("local"), models_dir)
        index = open_index(settings, embedder.dim, embedder.model_id)
        ingestor = LocalIngestor(
            IngestService.from_settings(
                index,
                embedder,
                settings.chunking,
                max_document_bytes=settings.gateway.max_document_bytes,
                claim_vectors=settings.index.claim_vectors,
            )
        )
        yield ingestor
        ingestor.close()
        index.close()
