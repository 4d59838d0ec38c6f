"""``TenantSource`` (another tenant's corpus in this index, read as a service principal that sees only
what that tenant shares with everyone) under the ``SecondarySource`` contract, on a real runtime; its
failing twin searches through a retrieval service that is not there (distributed mode, service down)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.config import RemoteSettings
from services.common.net import free_port
from services.common.settings import RampartSettings
from services.factcheck.config import FactCheckSettings
from services.orchestrator.corrective.secondary import SecondarySource, TenantSource
from services.orchestrator.runtime import Runtime
from services.orchestrator.search import SearchPipeline
from services.rerank.reranker import Reranker
from services.retrieval.config import FusionSettings
from services.retrieval.embedder import Embedder
from services.retrieval.remote_retriever import RemoteRetriever
from tests.contracts.secondary_source import CORPUS, KB, SecondarySourceContract


@pytest.fixture(scope="module")
def rt(
    tmp_path_factory: pytest.TempPathFactory, models_dir: Path, embedder: Embedder, reranker: Reranker
) -> Iterator[Runtime]:
    settings = RampartSettings(
        data_dir=tmp_path_factory.mktemp("secondary") / "data",
        models_dir=models_dir,
        log_level="WARNING",
        factcheck=FactCheckSettings(enabled=False),
    )
    runtime = Runtime.open(settings, embedder=embedder, reranker=reranker)
    results = runtime.ingest.ingest(CORPUS)
    assert all(r.outcome.value == "indexed" for r in results), results
    yield runtime
    runtime.close()


class TestTenantSource(SecondarySourceContract):
    @pytest.fixture()
    def source(self, rt: Runtime) -> SecondarySource:
        return TenantSource(rt.search, KB)

    @pytest.fixture()
    def failing_source(self) -> Iterator[SecondarySource]:
        retriever = RemoteRetriever.connect(f"127.0.0.1:{free_port()}", RemoteSettings(deadline_ms=1000))
        yield TenantSource(SearchPipeline(retriever, FusionSettings()), KB)
        retriever.close()
