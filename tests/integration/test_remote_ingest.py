"""``RemoteIngest`` (distributed mode: the durable ingest service over gRPC, with the retrieval
service, both real subprocesses) under the ``Ingestor`` contract."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.ingest.ingestor import Ingestor
from tests.contracts.ingestor import MAX_DOCUMENT_BYTES, IngestorContract
from tests.integration.ingest_servers import IngestStack


class TestRemoteIngest(IngestorContract):
    @pytest.fixture(scope="class")
    @classmethod
    def ingestor(cls, tmp_path_factory: pytest.TempPathFactory, models_dir: Path) -> Iterator[Ingestor]:
        work = tmp_path_factory.mktemp("remote")
        with IngestStack(
            work, models_dir, {"RAMPART_GATEWAY__MAX_DOCUMENT_BYTES": str(MAX_DOCUMENT_BYTES)}
        ) as stack:
            ingestor = stack.client()
            yield ingestor
            ingestor.close()
