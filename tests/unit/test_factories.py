"""One factory per stage: each picks the backend from settings, and it is the only place that does.

The remote clients are lazy (no network until the first call), so building them needs no server.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from services.common.config import RemoteSettings
from services.common.errors import ErrorCode, RampartError
from services.common.settings import RampartSettings
from services.ingest.ingestor import LocalIngestor, build_ingestor
from services.ingest.remote_ingest import RemoteIngest
from services.ingest.service import IngestService
from services.orchestrator.runtime import Runtime, Variant
from services.retrieval.embedded_index import EmbeddedIndex
from services.retrieval.hybrid import HybridRetriever
from services.retrieval.index import open_index, open_stored_index
from services.retrieval.remote_index import RemoteIndex
from services.retrieval.remote_retriever import RemoteRetriever
from services.retrieval.retriever import build_retriever

DIM = 8
ADDRESS = "127.0.0.1:1"  # never dialled: the clients connect on their first call


class FixedEmbedder:
    """Enough of ``Embedder`` for the factories (they never embed)."""

    model_id = "fixed"
    dim = DIM

    def embed(self, texts: list[str]) -> npt.NDArray[np.float32]:
        return np.zeros((len(texts), DIM), dtype=np.float32)


def embedded(tmp_path: Path) -> RampartSettings:
    return RampartSettings(data_dir=tmp_path / "data", models_dir=tmp_path / "models")


def remote(tmp_path: Path) -> RampartSettings:
    return embedded(tmp_path).model_copy(update={"remote": RemoteSettings(retrieval_address=ADDRESS)})


def test_index_is_embedded_without_a_retrieval_address(tmp_path: Path) -> None:
    index = open_index(embedded(tmp_path), DIM, "fixed")
    try:
        assert isinstance(index, EmbeddedIndex)
        assert (tmp_path / "data" / "index").is_dir()
    finally:
        index.close()


def test_index_is_the_retrieval_services_with_an_address(tmp_path: Path) -> None:
    index = open_index(remote(tmp_path), DIM, "fixed")
    try:
        assert isinstance(index, RemoteIndex)
        assert index.address == ADDRESS
        assert not (tmp_path / "data" / "index").exists()  # nothing opened locally
    finally:
        index.close()


def test_the_retrieval_service_stores_its_own_index_whatever_the_address(tmp_path: Path) -> None:
    """The stack gives every program ``remote.retrieval_address``, the retrieval service included."""
    index = open_stored_index(remote(tmp_path), DIM, "fixed")
    try:
        assert isinstance(index, EmbeddedIndex)
    finally:
        index.close()


def test_retriever_follows_the_same_setting(tmp_path: Path) -> None:
    settings = embedded(tmp_path)
    index = open_index(settings, DIM, "fixed")
    try:
        assert isinstance(build_retriever(settings, index, FixedEmbedder()), HybridRetriever)
        far = build_retriever(remote(tmp_path), index, FixedEmbedder())
        assert isinstance(far, RemoteRetriever)
        assert far.address == ADDRESS
        far.close()
    finally:
        index.close()


def test_ingestor_is_in_process_without_an_ingest_address(tmp_path: Path) -> None:
    settings = embedded(tmp_path)
    index = open_index(settings, DIM, "fixed")
    try:
        service = IngestService.from_settings(
            index,
            FixedEmbedder(),
            settings.chunking,
            max_document_bytes=settings.gateway.max_document_bytes,
            claim_vectors=settings.index.claim_vectors,
        )
        local = build_ingestor(settings, service)
        assert isinstance(local, LocalIngestor)
        assert local.service is service
        far = settings.model_copy(update={"remote": RemoteSettings(ingest_address=ADDRESS)})
        remote_ingest = build_ingestor(far, service)
        assert isinstance(remote_ingest, RemoteIngest)
        assert remote_ingest.address == ADDRESS
        remote_ingest.close()
    finally:
        index.close()


def test_ingestor_without_a_service_needs_the_address(tmp_path: Path) -> None:
    with pytest.raises(RampartError) as err:
        build_ingestor(embedded(tmp_path))
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "RAMPART_REMOTE__INGEST_ADDRESS" in err.value.message


def test_a_variant_changes_only_what_it_names(tmp_path: Path) -> None:
    """Evaluation measures the served runtime: a variant moves the index into its own folder (never
    the retrieval service's), may leave a stage out or resize the score cache, and touches nothing else."""
    served = remote(tmp_path)
    assert Variant().apply(served) == served
    measured = Variant(data_dir=tmp_path / "cache", rerank=False, factcheck=False, rerank_cache=7).apply(
        served
    )
    assert measured.data_dir == tmp_path / "cache"
    assert measured.remote.retrieval_address is None
    assert (measured.rerank.backend, measured.rerank.cache_size, measured.factcheck.backend) == (
        "none",
        7,
        "none",
    )
    same = {"data_dir", "remote", "rerank", "factcheck"}
    assert measured.model_dump(exclude=same) == served.model_dump(exclude=same)
    assert measured.remote.model_dump(exclude={"retrieval_address"}) == served.remote.model_dump(
        exclude={"retrieval_address"}
    )


def test_a_variant_without_reranking_takes_no_reranker(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rerank=False"):
        Runtime.open(
            embedded(tmp_path), embedder=FixedEmbedder(), reranker=object(), variant=Variant(rerank=False)
        )  # type: ignore[arg-type]


def test_the_feedback_store_is_sqlite_in_the_data_folder_or_redis_when_set(tmp_path: Path) -> None:
    """``build_feedback_store`` is the one place its backend is chosen; neither backend opens a file or
    a connection until used, and the redis backend without a URL is refused naming the variable."""
    from pydantic import ValidationError

    from services.learning.feedback_redis import RedisFeedbackStore
    from services.learning.feedback_sqlite import SqliteFeedbackStore
    from services.learning.feedback_store import build_feedback_store

    local = build_feedback_store(RampartSettings(data_dir=tmp_path / "data"))
    assert isinstance(local, SqliteFeedbackStore) and local.path == tmp_path / "data" / "feedback.sqlite3"
    assert not local.path.exists()
    shared = RampartSettings(
        data_dir=tmp_path,
        feedback={"backend": "redis", "redis_url": "redis://127.0.0.1:1/3"},  # type: ignore[arg-type]
    )
    assert isinstance(build_feedback_store(shared), RedisFeedbackStore)
    with pytest.raises(ValidationError, match="RAMPART_FEEDBACK__REDIS_URL"):
        RampartSettings(feedback={"backend": "redis"})  # type: ignore[arg-type]
