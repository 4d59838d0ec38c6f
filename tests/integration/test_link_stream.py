"""Hybrid search's link stream: pages the top results name by title join the head, within the
caller's ACL, and travel over gRPC like every other hit (real embedder, real index, real server)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from services.common.net import free_port
from services.common.settings import FusionSettings, GrpcServerSettings, RemoteSettings
from services.common.types import Acl, Chunk, Principal
from services.retrieval.doc_store import ChunkWrite, DocumentWrite
from services.retrieval.embedded_index import EmbeddedIndex
from services.retrieval.embedder import Embedder
from services.retrieval.hybrid import LINK_SCORE, HybridRetriever, SearchParams
from services.retrieval.remote_retriever import RemoteRetriever
from services.retrieval.server import RetrievalApp
from tests.integration.grpc_servers import BackgroundLoop

pytestmark = pytest.mark.integration

ALICE = Principal(tenant="acme", user="alice", groups=["eng"])
BOB = Principal(tenant="acme", user="bob", groups=["hr"])
QUESTION = "When did Nirvana release Bleach, their first album?"
# (doc id, title, groups, text): the first names two pages that share no word with the question
DOCS = [
    (
        "bleach",
        "Bleach (album)",
        ["*"],
        "Bleach is the first album Nirvana released, on the Sub Pop label, "
        "produced by Jack Endino; the band later wrote for Private Ledger.",
    ),
    ("subpop", "Sub Pop", ["*"], "A record label founded in Seattle by Bruce Pavitt in 1986."),
    ("endino", "Jack Endino", ["*"], "A record producer and engineer from Seattle."),
    ("ledger", "Private Ledger", ["hr"], "Payroll figures kept by the finance team."),
    *[
        (f"album{i}", f"Album {i}", ["*"], f"Nirvana album number {i}: which songs the band released on it.")
        for i in range(12)
    ],
]


def writes(embedder: Embedder, index: EmbeddedIndex) -> list[DocumentWrite]:
    texts = [t for *_, t in DOCS]
    vectors = embedder.embed(texts)
    lengths = index.token_lengths(texts)
    return [
        DocumentWrite(
            tenant="acme",
            doc_id=doc_id,
            version=1,
            content_hash="h",
            title=title,
            source="wiki",
            acl=Acl(groups=groups),
            metadata={},
            chunks=[
                ChunkWrite(
                    Chunk(
                        chunk_id=f"{doc_id}#0",
                        doc_id=doc_id,
                        tenant="acme",
                        ordinal=0,
                        text=text,
                        title=title,
                    ),
                    lengths[i],
                    vectors[i],
                )
            ],
        )
        for i, (doc_id, title, groups, text) in enumerate(DOCS)
    ]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Iterator[EmbeddedIndex]:
    ix = EmbeddedIndex.open(tmp_path_factory.mktemp("links") / "index", dim=embedder.dim)
    ix.write(writes(embedder, ix))
    yield ix
    ix.close()


def params(top_k: int, link_seeds: int, link_head: int = 0) -> SearchParams:
    p = SearchParams.from_settings(FusionSettings(), top_k=top_k, link_seeds=link_seeds)
    return replace(p, link_head=link_head)


def docs(hits: list) -> list[str]:  # type: ignore[type-arg]
    return [h.chunk.doc_id for h in hits]


def test_named_pages_join_the_tail_of_the_head(index: EmbeddedIndex, embedder: Embedder) -> None:
    retriever = HybridRetriever(index, embedder)
    plain = retriever.search(QUESTION, ALICE, params(8, 0))
    assert docs(plain.hits)[0] == "bleach" and not {"subpop", "endino"} & set(docs(plain.hits))
    assert all(LINK_SCORE not in h.scores for h in plain.hits) and "link" not in plain.timings_ms

    linked = retriever.search(QUESTION, ALICE, params(8, 1))
    got = docs(linked.hits)
    assert len(got) == 8 and got[:6] == docs(plain.hits)[:6]  # at most a quarter of the head is replaced
    assert got[6:] == ["subpop", "endino"]  # in the order the seed names them
    for h in linked.hits[6:]:
        assert h.scores[LINK_SCORE] == 1.0
        assert h.scores["bm25"] == 0.0 and h.scores["dense"] is not None  # filled in: exact scores
        assert h.fused <= linked.hits[5].fused
    assert "link" in linked.timings_ms


def test_named_pages_join_the_end_of_the_reranked_head(index: EmbeddedIndex, embedder: Embedder) -> None:
    retriever = HybridRetriever(index, embedder)
    plain = docs(retriever.search(QUESTION, ALICE, params(15, 0)).hits)
    deep = plain.index("subpop")
    assert deep >= 8  # ranked below the head of 8
    got = docs(retriever.search(QUESTION, ALICE, params(15, 1, link_head=8)).hits)
    assert got[:6] == plain[:6] and got[6:8] == ["subpop", "endino"]  # the head's last two places
    assert len(got) == 15 and len(set(got)) == 15  # moved up, not repeated; the rest pushed down
    assert got[8:] == [d for d in plain[6:] if d not in ("subpop", "endino")][:7]


def test_link_stream_keeps_the_acl(index: EmbeddedIndex, embedder: Embedder) -> None:
    retriever = HybridRetriever(index, embedder)
    for who in (ALICE, BOB):
        got = docs(retriever.search(QUESTION, who, params(12, 1)).hits)
        assert ("ledger" in got) is (who is BOB)  # named by the seed, readable by hr only
    assert "ledger" not in docs(retriever.search(QUESTION, ALICE, params(40, 3)).hits)


def test_small_head_keeps_at_least_its_top(index: EmbeddedIndex, embedder: Embedder) -> None:
    retriever = HybridRetriever(index, embedder)
    got = docs(retriever.search(QUESTION, ALICE, params(2, 1)).hits)
    assert got == ["bleach", "subpop"]  # one place of two: the seed itself is never displaced
    assert docs(retriever.search(QUESTION, ALICE, params(1, 1)).hits) == ["bleach"]


def test_link_stream_over_grpc_equals_local(tmp_path: Path, index: EmbeddedIndex, embedder: Embedder) -> None:
    loop = BackgroundLoop()
    port = free_port()

    async def start() -> RetrievalApp:
        served = EmbeddedIndex.open(tmp_path / "served", dim=embedder.dim)
        served.write(writes(embedder, served))
        app = RetrievalApp(GrpcServerSettings(host="127.0.0.1", port=port), served, embedder)
        await app.start()
        return app

    app = loop.run(start())
    remote = RemoteRetriever.connect(f"127.0.0.1:{port}", RemoteSettings())
    try:
        want = HybridRetriever(index, embedder).search(QUESTION, ALICE, params(8, 1))
        got = remote.search(QUESTION, ALICE, params(8, 1))
        assert docs(got.hits) == docs(want.hits)
        assert [h.scores.get(LINK_SCORE) for h in got.hits] == [h.scores.get(LINK_SCORE) for h in want.hits]
    finally:
        remote.close()
        loop.run(app.stop(grace_s=1.0))
        loop.close()
