"""An index with storage alone (``SearchIndex``, without the fact-check's or linking's reads) still
searches; a search or an RPC that needs a capability it lacks is refused with FAILED_PRECONDITION
naming the capability and the fix, never an AttributeError."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from services.common.config import RemoteSettings, RetrievalServiceSettings
from services.common.errors import ErrorCode, RampartError
from services.common.net import free_port
from services.common.types import Acl, Chunk, Principal
from services.retrieval.capabilities import CheckReads
from services.retrieval.config import FusionSettings
from services.retrieval.doc_store import ChunkWrite, DocumentWrite
from services.retrieval.embedded_index import EmbeddedIndex
from services.retrieval.hybrid import HybridRetriever, SearchParams
from services.retrieval.links.options import LinkOptions
from services.retrieval.links.reads import LinkReads
from services.retrieval.remote_index import RemoteIndex
from services.retrieval.server import RetrievalApp
from tests.integration.grpc_servers import BackgroundLoop

DIM = 16
ALICE = Principal(tenant="t1", user="alice", groups=["eng"])
CAPABILITY_READS = ("stored_vectors", "copy_cosines", "named")


def vec(text: str) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    for word in text.lower().split():
        v[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return v / (np.linalg.norm(v) or 1.0)


class StorageOnly:
    """An index serving ``SearchIndex`` alone, as a backend without claim vectors or a title table
    would: every storage method is the embedded index's, the capabilities' reads are absent."""

    def __init__(self, inner: EmbeddedIndex) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in CAPABILITY_READS:
            raise AttributeError(name)
        return getattr(self._inner, name)

    def close(self) -> None:
        """The fixture that opened the embedded index closes it."""


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[EmbeddedIndex]:
    ix = EmbeddedIndex.open(tmp_path / "index", dim=DIM)
    texts = {
        "sub": ("Sub Pop", "Sub Pop is a record label in Seattle"),
        "nir": ("Nirvana", "Nirvana signed to Sub Pop"),
    }
    ix.write(
        [
            DocumentWrite(
                tenant="t1",
                doc_id=doc_id,
                version=1,
                content_hash="h",
                title=title,
                source="",
                acl=Acl(groups=["*"]),
                metadata={},
                chunks=[
                    ChunkWrite(
                        Chunk(
                            chunk_id=f"{doc_id}#0",
                            doc_id=doc_id,
                            tenant="t1",
                            ordinal=0,
                            text=text,
                            version=1,
                        ),
                        len(text.split()),
                        vec(text),
                        vec(text),
                    )
                ],
            )
            for doc_id, (title, text) in texts.items()
        ]
    )
    yield ix
    ix.close()


def test_storage_only_index_searches_and_refuses_what_needs_a_capability(embedded: EmbeddedIndex) -> None:
    storage = StorageOnly(embedded)
    assert not isinstance(storage, CheckReads) and not isinstance(storage, LinkReads)
    plain = SearchParams.from_settings(FusionSettings(), top_k=5, link_seeds=0)
    query = "record label"
    want = HybridRetriever(embedded, None).search_with_vector(query, vec(query), ALICE, plain)  # type: ignore[arg-type]
    got = HybridRetriever(storage, None).search_with_vector(query, vec(query), ALICE, plain)  # type: ignore[arg-type]
    assert [h.chunk.chunk_id for h in got.hits] == [h.chunk.chunk_id for h in want.hits] and got.hits
    for params, capability in (
        (replace(plain, vectors=True), "CheckReads"),
        (replace(plain, copy_depth=2), "CheckReads"),
        (replace(plain, links=LinkOptions(seeds=1)), "LinkReads"),
    ):
        with pytest.raises(RampartError) as err:
            HybridRetriever(storage, None).search_with_vector(query, vec(query), ALICE, params)  # type: ignore[arg-type]
        assert err.value.code is ErrorCode.FAILED_PRECONDITION
        assert err.value.details["capability"] == capability and "StorageOnly" in err.value.message


def test_index_service_refuses_the_reads_its_index_lacks(embedded: EmbeddedIndex) -> None:
    loop = BackgroundLoop()
    app = RetrievalApp(
        RetrievalServiceSettings(host="127.0.0.1", port=free_port()), StorageOnly(embedded), None
    )  # type: ignore[arg-type]
    port = loop.run(app.start())
    client = RemoteIndex.connect(f"127.0.0.1:{port}", RemoteSettings())
    try:
        assert client.bm25("record label", ALICE, 5)  # storage is served
        cid = client.bm25("record label", ALICE, 5)[0][0]
        for call, capability in (
            (lambda: client.stored_vectors([cid], ALICE), "CheckReads"),
            (lambda: client.copy_cosines([cid], ALICE, 8), "CheckReads"),
            (lambda: client.named(["Sub Pop"], ALICE, 5), "LinkReads"),
        ):
            with pytest.raises(RampartError) as err:
                call()
            assert err.value.code is ErrorCode.FAILED_PRECONDITION
            assert err.value.details["capability"] == capability
    finally:
        client.close()
        loop.run(app.stop(grace_s=1.0))
        loop.close()
