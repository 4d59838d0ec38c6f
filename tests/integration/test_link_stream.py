"""Hybrid search's link stream: pages the top results name by title join the head, within the
caller's ACL, and travel over gRPC like every other hit (real embedder, real index, real server)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from services.common.config import CorpusProfile, CorpusSettings, RemoteSettings, RetrievalServiceSettings
from services.common.net import free_port
from services.common.types import Acl, Chunk, Principal
from services.orchestrator.search import SearchPipeline
from services.retrieval.config import FusionSettings
from services.retrieval.doc_store import ChunkWrite, DocumentWrite
from services.retrieval.embedded_index import EmbeddedIndex
from services.retrieval.embedder import Embedder
from services.retrieval.hybrid import HybridRetriever, SearchParams
from services.retrieval.links.options import NO_LINKS, LinkOptions
from services.retrieval.links.stream import BACKLINK_SCORE, LINK_SCORE
from services.retrieval.remote_retriever import RemoteRetriever
from services.retrieval.server import RetrievalApp
from tests.integration.grpc_servers import BackgroundLoop

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


def writes(
    embedder: Embedder,
    index: EmbeddedIndex,
    docs: list[tuple[str, str, list[str], str]] = DOCS,
    tenant: str = "acme",
) -> list[DocumentWrite]:
    texts = [t for *_, t in docs]
    vectors = embedder.embed(texts)
    lengths = index.token_lengths(texts)
    return [
        DocumentWrite(
            tenant=tenant,
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
                        tenant=tenant,
                        ordinal=0,
                        text=text,
                        title=title,
                    ),
                    lengths[i],
                    vectors[i],
                    vectors[i],  # the claim vector: one chunk, no header, so the same text
                )
            ],
        )
        for i, (doc_id, title, groups, text) in enumerate(docs)
    ]


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Iterator[EmbeddedIndex]:
    ix = EmbeddedIndex.open(tmp_path_factory.mktemp("links") / "index", dim=embedder.dim)
    ix.write(writes(embedder, ix))
    yield ix
    ix.close()


def params(top_k: int, link_seeds: int, link_head: int = 0, backlinks: int = 0) -> SearchParams:
    p = SearchParams.from_settings(FusionSettings(), top_k=top_k, link_seeds=link_seeds, backlinks=backlinks)
    return replace(p, links=replace(p.links, head=link_head))


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


def test_the_pipeline_follows_links_for_a_linked_tenant_only(tmp_path: Path, embedder: Embedder) -> None:
    """One search pipeline over an index holding the same pages for two tenants: the pages the seed
    names join the wiki tenant's head (linked), not the papers tenant's (generic, the default), from the
    same settings' link_seeds."""
    ix = EmbeddedIndex.open(tmp_path / "index", dim=embedder.dim)
    try:
        ix.write(writes(embedder, ix) + writes(embedder, ix, tenant="papers"))
        pipeline = SearchPipeline(
            HybridRetriever(ix, embedder),
            FusionSettings(),
            corpus=CorpusSettings(tenants={"acme": CorpusProfile.LINKED}),
        )
        wiki = pipeline.search(QUESTION, ALICE, pipeline.params(top_k=8))
        papers = pipeline.search(
            QUESTION, ALICE.model_copy(update={"tenant": "papers"}), pipeline.params(top_k=8)
        )
    finally:
        ix.close()
    assert {"subpop", "endino"} <= set(docs(wiki.hits)) and "link" in wiki.timings_ms
    assert not {"subpop", "endino"} & set(docs(papers.hits)) and "link" not in papers.timings_ms
    assert all(h.chunk.tenant == "papers" for h in papers.hits)


def test_small_head_keeps_at_least_its_top(index: EmbeddedIndex, embedder: Embedder) -> None:
    retriever = HybridRetriever(index, embedder)
    got = docs(retriever.search(QUESTION, ALICE, params(2, 1)).hits)
    assert got == ["bleach", "subpop"]  # one place of two: the seed itself is never displaced
    assert docs(retriever.search(QUESTION, ALICE, params(1, 1)).hits) == ["bleach"]


@contextmanager
def served(
    tmp_path: Path, embedder: Embedder, corpus: list[tuple[str, str, list[str], str]]
) -> Iterator[RemoteRetriever]:
    """A real retrieval gRPC server on loopback over ``corpus``, and a client of it."""
    loop = BackgroundLoop()
    port = free_port()

    async def start() -> RetrievalApp:
        index = EmbeddedIndex.open(tmp_path / "served", dim=embedder.dim)
        index.write(writes(embedder, index, corpus))
        app = RetrievalApp(RetrievalServiceSettings(host="127.0.0.1", port=port), index, embedder)
        await app.start()
        return app

    app = loop.run(start())
    remote = RemoteRetriever.connect(f"127.0.0.1:{port}", RemoteSettings())
    try:
        yield remote
    finally:
        remote.close()
        loop.run(app.stop(grace_s=1.0))
        loop.close()


def test_link_stream_over_grpc_equals_local(tmp_path: Path, index: EmbeddedIndex, embedder: Embedder) -> None:
    with served(tmp_path, embedder, DOCS) as remote:
        want = HybridRetriever(index, embedder).search(QUESTION, ALICE, params(8, 1))
        got = remote.search(QUESTION, ALICE, params(8, 1))
    assert docs(got.hits) == docs(want.hits)
    assert [h.scores.get(LINK_SCORE) for h in got.hits] == [h.scores.get(LINK_SCORE) for h in want.hits]


# A page that names the top result ("Frank Thomas") without sharing the question's words: the second
# page of a two-hop question that the first one does not name.
HURT = "Which pinball machine is named after the only player with seven straight .300 seasons?"
BACK_DOCS = [
    (
        "thomas",
        "Frank Thomas (designated hitter)",
        ["*"],
        "Frank Thomas is the only player in major league history with seven straight seasons "
        "batting .300 with 100 walks, 100 runs and 100 RBIs.",
    ),
    (
        "bighurt",
        "Big Hurt (game)",
        ["*"],
        "Designed by Bill Parker for Gottlieb in 1995 and endorsed by Frank Thomas.",
    ),
    ("payroll", "Payroll 1995", ["hr"], "Frank Thomas signed for the payroll office in 1995."),
    ("memo", "Memo", ["*"], "A frank thomas-style talk about the 1995 pinball machine market."),
    *[
        (
            f"pin{i}",
            f"Pinball {i}",
            ["*"],
            f"Pinball machine number {i} named after a player and his seasons.",
        )
        for i in range(12)
    ],
]


@pytest.fixture(scope="module")
def back_index(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Iterator[EmbeddedIndex]:
    ix = EmbeddedIndex.open(tmp_path_factory.mktemp("backlinks") / "index", dim=embedder.dim)
    ix.write(writes(embedder, ix, BACK_DOCS))
    yield ix
    ix.close()


def test_pages_naming_a_seed_join_the_head(back_index: EmbeddedIndex, embedder: Embedder) -> None:
    retriever = HybridRetriever(back_index, embedder)
    plain = docs(retriever.search(HURT, ALICE, params(8, 3)).hits)
    assert "thomas" in plain[:3] and "bighurt" not in plain  # the seed ranks; the page naming it does not
    linked = retriever.search(HURT, ALICE, params(8, 3, backlinks=2))
    got = docs(linked.hits)
    assert "bighurt" in got and len(got) == 8
    assert linked.hits[got.index("bighurt")].scores[BACKLINK_SCORE] == 1.0
    assert "memo" not in got  # "frank thomas" in lower case names nobody
    assert "payroll" not in got  # names the seed, but alice may not read it
    assert "payroll" in docs(retriever.search(HURT, BOB, params(8, 3, backlinks=2)).hits)


def test_a_seed_the_question_names_is_not_followed(back_index: EmbeddedIndex, embedder: Embedder) -> None:
    retriever = HybridRetriever(back_index, embedder)
    asked = "Which pinball machine is named after Frank Thomas?"
    got = retriever.search(asked, ALICE, params(8, 3, backlinks=2))
    assert all(BACKLINK_SCORE not in h.scores for h in got.hits)  # every page found for the name names it


def test_backlinks_over_grpc_equal_local(
    tmp_path: Path, back_index: EmbeddedIndex, embedder: Embedder
) -> None:
    with served(tmp_path, embedder, BACK_DOCS) as remote:
        want = HybridRetriever(back_index, embedder).search(HURT, ALICE, params(8, 3, backlinks=2))
        got = remote.search(HURT, ALICE, params(8, 3, backlinks=2))
    assert docs(got.hits) == docs(want.hits) and "bighurt" in docs(got.hits)
    assert [h.scores.get(BACKLINK_SCORE) for h in got.hits] == [
        h.scores.get(BACKLINK_SCORE) for h in want.hits
    ]


# Pages cut from one template: each opens with its own name (the copy leads tell them apart).
SEASONS = [
    (
        f"season{year}",
        f"{year} Colorado Buffaloes football team",
        ["*"],
        f"The {year} Colorado Buffaloes football team represented the University of Colorado in the "
        "college football season; the team played its home games at Folsom Field in Boulder.",
    )
    for year in (2009, 2010, 2011)
]
SEASON_Q = "Where did the Colorado Buffaloes football team play its home games?"


def test_copy_leads_travel_over_grpc_as_local(tmp_path: Path, embedder: Embedder) -> None:
    """A linked search asking for copy leads gets, per copy-checked hit, the name each close copy
    opens with; over gRPC (the extension's map) exactly as in-process; none unless asked."""
    local = EmbeddedIndex.open(tmp_path / "seasons", dim=embedder.dim)
    local.write(writes(embedder, local, SEASONS))
    asked = replace(params(3, 0), copy_depth=3, links=LinkOptions(copy_leads=0.8))
    with served(tmp_path, embedder, SEASONS) as remote:
        want = HybridRetriever(local, embedder).search(SEASON_Q, ALICE, asked)
        got = remote.search(SEASON_Q, ALICE, asked)
        plain = remote.search(SEASON_Q, ALICE, replace(asked, links=NO_LINKS))
    local.close()
    leads = {h.chunk.doc_id: h.copy_leads for h in got.hits}
    assert leads == {h.chunk.doc_id: h.copy_leads for h in want.hits}
    for doc_id, names in leads.items():
        year = doc_id.removeprefix("season")
        others = {f"{y} Colorado Buffaloes" for y in ("2009", "2010", "2011") if y != year}
        assert names is not None and set(names) == others, doc_id  # the other two seasons, by name
    assert all(h.copy_leads is None and h.copy_cosines for h in plain.hits)  # not asked: cosines only


def test_copy_overlaps_tell_an_edit_from_a_sibling(tmp_path: Path, embedder: Embedder) -> None:
    """The search reports how many words each close copy shares with the hit (core, every profile):
    an edited copy most, a template sibling fewer; over gRPC exactly as in-process; none unless asked."""
    edited = SEASONS[0][3].replace("Folsom Field", "Mile High Stadium")
    corpus = [*SEASONS, ("edit", "2009 season (edited)", ["*"], edited)]
    local = EmbeddedIndex.open(tmp_path / "edits", dim=embedder.dim)
    local.write(writes(embedder, local, corpus))
    asked = replace(params(4, 0), copy_depth=4, copy_overlap=0.8)
    with served(tmp_path, embedder, corpus) as remote:
        want = HybridRetriever(local, embedder).search(SEASON_Q, ALICE, asked)
        got = remote.search(SEASON_Q, ALICE, asked)
        plain = remote.search(SEASON_Q, ALICE, replace(asked, copy_overlap=0.0))
    local.close()
    assert [h.copy_overlaps for h in got.hits] == [h.copy_overlaps for h in want.hits]
    by_doc = {h.chunk.doc_id: h for h in got.hits}
    edit = by_doc["edit"]
    assert edit.copy_overlaps is not None and edit.copy_arrivals is not None
    closest = edit.copy_overlaps[0]  # its closest copy is the season page it edits
    assert closest > 0.5 and all(o < closest for o in edit.copy_overlaps[1:])
    assert all(h.copy_overlaps is None and h.copy_cosines for h in plain.hits)
