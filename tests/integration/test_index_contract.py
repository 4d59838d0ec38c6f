"""Contract suite for ``SearchIndex``: every implementation that can run here must pass it.

Vectors here are hand-made inputs (the index stores whatever it is given); the real embedder is
exercised in the pipeline and gateway tests.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from services.common.errors import RampartError
from services.common.net import free_port
from services.common.settings import GrpcServerSettings, IndexSettings, RemoteSettings
from services.common.types import Acl, Chunk, DocumentState, Principal, SearchFilters
from services.retrieval.capabilities import CheckReads, Copies, LinkReads, check_reads, link_reads
from services.retrieval.doc_store import ChunkWrite, DocumentWrite
from services.retrieval.embedded_index import EmbeddedIndex
from services.retrieval.index import SearchIndex
from services.retrieval.remote_index import RemoteIndex
from services.retrieval.server import RetrievalApp
from tests.integration.grpc_servers import BackgroundLoop

pytestmark = pytest.mark.integration
DIM = 16


def vec(text: str) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    for word in text.lower().split():
        v[int(hashlib.md5(word.encode()).hexdigest(), 16) % DIM] += 1.0
    return v / (np.linalg.norm(v) or 1.0)


def doc(
    doc_id: str,
    texts: list[str],
    *,
    tenant: str = "t1",
    groups: list[str] | None = None,
    users: list[str] | None = None,
    version: int = 1,
    metadata: dict | None = None,
    analyze: Callable[[str], int] = lambda s: len(s.split()),
    claims: list[str] | None = None,
    title: str = "",
) -> DocumentWrite:
    chunks = [
        ChunkWrite(
            Chunk(chunk_id=f"{doc_id}#{i}", doc_id=doc_id, tenant=tenant, ordinal=i, text=t, version=version),
            analyze(t),
            vec(t),
            vec(claims[i]) if claims is not None else None,
        )
        for i, t in enumerate(texts)
    ]
    return DocumentWrite(
        tenant=tenant,
        doc_id=doc_id,
        version=version,
        content_hash=f"h{version}",
        title=title,
        source="",
        acl=Acl(users=users or [], groups=groups if groups is not None else (["*"] if not users else [])),
        metadata=metadata or {},
        chunks=chunks,
    )


ALICE = Principal(tenant="t1", user="alice", groups=["eng"])
BOB = Principal(tenant="t1", user="bob", groups=["hr"])
EVE = Principal(tenant="t2", user="eve", groups=["eng"])


class ServedIndex:
    """An embedded index served by an in-process retrieval gRPC server, used through ``RemoteIndex``."""

    def __init__(self, loop: BackgroundLoop, root: Path, kind: str) -> None:
        self.loop = loop
        port = loop.run(self._start(root, kind))
        self.client = RemoteIndex.connect(f"127.0.0.1:{port}", RemoteSettings())

    async def _start(self, root: Path, kind: str) -> int:
        # Opened on the loop's thread, which also closes it (the index's file lock is per thread).
        index = EmbeddedIndex.open(root, dim=DIM, settings=IndexSettings(vector_kind=kind))
        self.app = RetrievalApp(GrpcServerSettings(host="127.0.0.1", port=free_port()), index, None)
        return await self.app.start()

    def close(self) -> None:
        self.client.close()
        self.loop.run(self.app.stop(grace_s=1.0))  # closes the embedded index too


@pytest.fixture(params=["embedded-flat", "embedded-hnsw", "remote-flat"])
def make_index(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], SearchIndex]]:
    opened: list[EmbeddedIndex | ServedIndex] = []
    kind = "hnsw" if request.param.endswith("hnsw") else "flat"
    loop = BackgroundLoop() if request.param.startswith("remote") else None

    def make() -> SearchIndex:
        for ix in opened:
            ix.close()
        opened.clear()
        if loop is not None:
            served = ServedIndex(loop, tmp_path / "index", kind)
            opened.append(served)
            return served.client
        ix = EmbeddedIndex.open(tmp_path / "index", dim=DIM, settings=IndexSettings(vector_kind=kind))
        opened.append(ix)
        return ix

    yield make
    for ix in opened:
        ix.close()
    if loop is not None:
        loop.close()


def ids(hits: list[tuple[int, float]], index: SearchIndex) -> set[str]:
    return {c.doc_id for c in index.chunks([h[0] for h in hits]).values()}


def test_write_then_search_both_retrievers(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    ix.write([doc("a", ["parental leave is sixteen weeks"]), doc("b", ["the vpn needs a hardware token"])])
    assert ids(ix.bm25("parental leave", ALICE, 10), ix) == {"a"}
    dense = ix.dense(vec("parental leave weeks"), ALICE, 1)
    assert ids(dense, ix) == {"a"}
    assert ix.status("t1", "a").state is DocumentState.INDEXED  # type: ignore[union-attr]


def test_acl_and_tenant_filter_inside_both_searches(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    ix.write(
        [
            doc("pub", ["salary review process overview"]),
            doc("hr", ["salary bands for engineers"], groups=["hr"]),
            doc("mine", ["salary of alice"], users=["alice"]),
            doc("other", ["salary bands in tenant two"], tenant="t2"),
        ]
    )
    assert ids(ix.bm25("salary", ALICE, 10), ix) == {"pub", "mine"}
    assert ids(ix.bm25("salary", BOB, 10), ix) == {"pub", "hr"}
    assert ids(ix.bm25("salary", EVE, 10), ix) == {"other"}
    assert ids(ix.dense(vec("salary bands"), ALICE, 10), ix) == {"pub", "mine"}
    assert ids(ix.dense(vec("salary bands"), BOB, 10), ix) == {"pub", "hr"}
    # Asking for exactly one result still finds a readable one: filtering is not done after top-k.
    assert ids(ix.dense(vec("salary bands for engineers"), ALICE, 1), ix) <= {"pub", "mine"}
    assert len(ix.dense(vec("salary bands for engineers"), ALICE, 1)) == 1


def test_update_replaces_chunks_and_acl(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    ix.write([doc("a", ["old text about rockets"], groups=["hr"])])
    ix.write([doc("a", ["new text about boats"], version=2)])
    assert ix.bm25("rockets", BOB, 10) == []
    assert ids(ix.bm25("boats", ALICE, 10), ix) == {"a"}  # ACL widened to everyone
    assert ix.current("t1", "a")[0] == 2  # type: ignore[index]
    assert ix.stats()["chunks"] == 1


def test_delete_removes_from_every_search(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    ix.write([doc("a", ["alpha beta"]), doc("b", ["alpha gamma"])])
    assert ix.delete("t1", "a") is True
    assert ids(ix.bm25("alpha", ALICE, 10), ix) == {"b"}
    assert ids(ix.dense(vec("alpha beta"), ALICE, 10), ix) == {"b"}
    assert ix.status("t1", "a").state is DocumentState.DELETED  # type: ignore[union-attr]
    assert ix.delete("t1", "a") is False
    assert ix.delete("t2", "b") is False  # other tenant's id space


def test_filters_apply_inside(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    ix.write([doc("a", ["alpha"], metadata={"dept": "hr"}), doc("b", ["alpha"], metadata={"dept": "eng"})])
    f = SearchFilters(metadata={"dept": "eng"})
    assert ids(ix.bm25("alpha", ALICE, 10, filters=f), ix) == {"b"}
    assert ids(ix.dense(vec("alpha"), ALICE, 10, filters=f), ix) == {"b"}
    assert ids(ix.bm25("alpha", ALICE, 10, filters=SearchFilters(doc_ids=["a"])), ix) == {"a"}


def test_restrict_scores_only_given_chunks(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    ix.write([doc("a", ["alpha beta"]), doc("b", ["alpha"]), doc("c", ["gamma"])])
    all_hits = dict(ix.bm25("alpha", ALICE, 10))
    b_cid = next(c for c, ch in ix.chunks(list(all_hits)).items() if ch.doc_id == "b")
    restricted = ix.bm25("alpha", ALICE, 10, restrict=[b_cid])
    assert restricted == [(b_cid, pytest.approx(all_hits[b_cid]))]


def test_reopen_keeps_everything(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    ix.write([doc("a", ["persisted words here"], groups=["eng"])])
    ix2 = make_index()  # closes the first
    assert ids(ix2.bm25("persisted", ALICE, 10), ix2) == {"a"}
    assert ids(ix2.dense(vec("persisted words here"), ALICE, 10), ix2) == {"a"}
    assert ix2.bm25("persisted", BOB, 10) == []


def test_second_process_is_refused(tmp_path: Path) -> None:
    ix = EmbeddedIndex.open(tmp_path / "i", dim=DIM)
    try:
        with pytest.raises(RampartError, match="in use"):
            EmbeddedIndex.open(tmp_path / "i", dim=DIM)
    finally:
        ix.close()


def test_index_built_with_another_model_is_refused(tmp_path: Path) -> None:
    EmbeddedIndex.open(tmp_path / "i", dim=DIM, model_id="model-a").close()
    EmbeddedIndex.open(tmp_path / "i", dim=DIM, model_id="model-a").close()
    with pytest.raises(RampartError, match="model-a") as err:
        EmbeddedIndex.open(tmp_path / "i", dim=DIM, model_id="model-b")
    assert "fresh RAMPART_DATA_DIR" in err.value.message
    EmbeddedIndex.open(tmp_path / "i", dim=DIM, model_id="model-a").close()  # lock was released


def test_custom_bm25_parameters_rescore_exactly(tmp_path: Path) -> None:
    texts = ["alpha alpha alpha beta", "alpha gamma delta epsilon zeta eta", "alpha"]
    default = EmbeddedIndex.open(tmp_path / "d", dim=DIM)
    default.write([doc(f"d{i}", [t], analyze=default.token_length) for i, t in enumerate(texts)])
    native = dict(default.bm25("alpha", ALICE, 10))
    default.close()
    custom = EmbeddedIndex.open(
        tmp_path / "d", dim=DIM, settings=IndexSettings(bm25_k1=1.2, bm25_b=0.75 - 1e-12)
    )
    rescored = dict(custom.bm25("alpha", ALICE, 10))
    custom.close()
    assert rescored.keys() == native.keys()
    for k in native:  # same parameters through the rescoring path give tantivy's scores
        assert rescored[k] == pytest.approx(native[k], rel=1e-3)
    nob = EmbeddedIndex.open(tmp_path / "d", dim=DIM, settings=IndexSettings(bm25_b=0.0))
    flat = dict(nob.bm25("alpha", ALICE, 10))
    nob.close()
    # b = 0 ignores length: the single-"alpha" and the long doc tie (tf 1 each)
    by_doc = {c: s for c, s in flat.items()}
    vals = sorted(by_doc.values())
    assert vals[0] == pytest.approx(vals[1])


def test_stored_vectors_are_what_was_written(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    ix.write([doc("a", ["parental leave is sixteen weeks"]), doc("b", ["the vpn needs a hardware token"])])
    cids = [cid for cid, _ in ix.bm25("parental leave vpn", ALICE, 10)]
    stored = ix.stored_vectors(cids)
    chunks = ix.chunks(cids)
    assert set(stored) == set(cids)
    for cid in cids:
        np.testing.assert_allclose(stored[cid], vec(chunks[cid].text), rtol=1e-6)
    assert ix.stored_vectors([]) == {}


def test_token_lengths_batch_matches_single(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    texts = ["Parental leave is sixteen weeks.", "", "the the vpn"]
    assert ix.token_lengths(texts) == [ix.token_length(t) for t in texts]
    assert ix.token_lengths(texts)[0] > 0
    assert ix.token_lengths([]) == []


def claimed(doc_id: str, claim: str, **kw: object) -> DocumentWrite:
    """A one-chunk document whose claim vector is ``claim``'s (its dense vector is its own text's)."""
    return doc(doc_id, [f"tok{doc_id} says {claim}"], claims=[claim], **kw)  # type: ignore[arg-type]


def cid_of(ix: SearchIndex, doc_id: str, ordinal: int = 0) -> int:
    hits = ix.bm25(f"tok{doc_id}", ALICE, 50)
    return next(
        c
        for c, ch in ix.chunks([h[0] for h in hits]).items()
        if ch.doc_id == doc_id and ch.ordinal == ordinal
    )


def test_copy_cosines_count_other_readable_documents_once(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    claim = "the moon is made of green cheese"
    ix.write(
        [
            doc(
                "a", ["toka says first", "toka says second"], claims=[claim, claim]
            ),  # its own copy never counts
            claimed("b", claim),
            claimed("c", "the moon is made of green cheese indeed"),
            claimed("d", "payroll runs on the last friday"),
            claimed("e", claim, groups=["hr"]),  # alice may not read it
            claimed("f", claim, tenant="t2"),  # another tenant
            doc("g", ["tokg says nothing claimed"]),  # no claim vector
        ]
    )
    a0, g0 = cid_of(ix, "a"), cid_of(ix, "g")
    got = ix.copy_cosines([a0, g0], ALICE, 8)
    assert set(got) == {a0}  # g has no claim vector
    assert got[a0].neighbors == []  # not asked for (expand 0)
    cosines = got[a0].cosines
    assert len(cosines) == 3  # b, c, d: one per other readable document of the tenant
    assert cosines == sorted(cosines, reverse=True)
    assert cosines[0] == pytest.approx(1.0, abs=1e-5)  # b: the same claim
    assert cosines[1] == pytest.approx(
        float(vec(claim) @ vec("the moon is made of green cheese indeed")), abs=1e-5
    )
    assert ix.copy_cosines([a0], ALICE, 1)[a0].cosines == [pytest.approx(1.0, abs=1e-5)]
    bob = ix.copy_cosines([a0], BOB, 8)[a0].cosines  # bob (hr) reads e too
    assert len(bob) == 4
    assert ix.copy_cosines([], ALICE, 8) == {}
    for bad in (0, 65):
        with pytest.raises(RampartError, match=f"limit = {bad}"):
            ix.copy_cosines([a0], ALICE, bad)
    ix.delete("t1", "b")
    assert len(ix.copy_cosines([a0], ALICE, 8)[a0].cosines) == 2


def test_copy_neighbors_are_the_close_documents_own_copies(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    claim = "the moon is made of green cheese"
    ix.write(
        [
            claimed("a", claim),
            claimed("b", claim),
            claimed("c", "the moon is made of green cheese indeed"),
            claimed("d", "payroll runs on the last friday"),
            claimed("e", claim, groups=["hr"]),  # alice may not read it: never counted for her
        ]
    )
    a0, b0 = cid_of(ix, "a"), cid_of(ix, "b")
    plain = ix.copy_cosines([a0], ALICE, 8)[a0]
    moon = float(vec(claim) @ vec("the moon is made of green cheese indeed"))
    far = float(vec(claim) @ vec("payroll runs on the last friday"))
    assert far < moon < 0.999  # the fixture's embedder keeps the three levels apart
    got = ix.copy_cosines([a0], ALICE, 8, expand=(moon + far) / 2)[a0]
    assert got.cosines == plain.cosines
    assert len(got.neighbors) == 2  # b and c reach the expand cosine, d does not
    # b's own copies: a (same claim), c, d — e is hidden from alice here too
    assert got.neighbors[0] == ix.copy_cosines([b0], ALICE, 8)[b0].cosines
    assert got.neighbors[0][0] == pytest.approx(1.0, abs=1e-5) and len(got.neighbors[0]) == 3
    assert len(ix.copy_cosines([a0], BOB, 8, expand=0.999)[a0].neighbors[0]) == 4  # bob reads e
    for bad in (-0.1, 1.5):
        with pytest.raises(RampartError, match="expand"):
            ix.copy_cosines([a0], ALICE, 8, expand=bad)


def test_copy_leads_name_what_the_close_documents_open_with(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    claim = "the moon is made of green cheese"
    ix.write(
        [
            doc("a", ["The 2009 Moon Survey tokA found cheese."], claims=[claim]),
            doc("b", ["The 2011 Moon Survey tokB found cheese."], claims=[claim]),
            doc("c", ["renowned tokC found cheese."], claims=["the moon is made of green cheese indeed"]),
            doc("d", ["Payroll Office tokD pays on friday."], claims=["payroll runs on the last friday"]),
        ]
    )
    a0 = cid_of(ix, "a")
    plain = ix.copy_cosines([a0], ALICE, 8)[a0]
    assert plain.leads == []  # not asked for (leads 0)
    moon = float(vec(claim) @ vec("the moon is made of green cheese indeed"))
    far = float(vec(claim) @ vec("payroll runs on the last friday"))
    got = ix.copy_cosines([a0], ALICE, 8, leads=(moon + far) / 2)[a0]
    assert got.cosines == plain.cosines and got.neighbors == []
    assert got.leads == ["2011 Moon Survey", ""]  # b and c reach the cosine; c opens with no name
    for bad in (-0.1, 1.5):
        with pytest.raises(RampartError, match="leads"):
            ix.copy_cosines([a0], ALICE, 8, leads=bad)


def test_claim_vectors_survive_reopen_and_rebuild(
    make_index: Callable[[], SearchIndex], tmp_path: Path
) -> None:
    ix = make_index()
    ix.write([claimed("a", "one claim"), claimed("b", "one claim")])
    a0 = cid_of(ix, "a")
    ix2 = make_index()
    assert ix2.copy_cosines([a0], ALICE, 8)[a0].cosines == [pytest.approx(1.0, abs=1e-5)]
    claims = tmp_path / "index" / "claims.faiss"
    assert claims.exists()
    claims.unlink()  # (the open index keeps its copy in memory; the next open reads the store)
    ix3 = make_index()  # reconcile rebuilds the claim index from the store
    assert ix3.copy_cosines([a0], ALICE, 8)[a0].cosines == [pytest.approx(1.0, abs=1e-5)]


def edit_store(root: Path, *statements: str) -> None:
    """Run SQL on a closed index's store: make it look as an older version wrote it."""
    import sqlite3

    db = sqlite3.connect(root / "store.sqlite3")
    for sql in statements:
        db.execute(sql)
    db.commit()
    db.close()


def test_store_written_before_claim_vectors_opens(tmp_path: Path) -> None:
    import sqlite3

    root = tmp_path / "old"
    root.mkdir()
    db = sqlite3.connect(root / "store.sqlite3")
    db.execute(
        "CREATE TABLE chunks (cid INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, doc_id TEXT NOT NULL, "
        "ordinal INTEGER NOT NULL, chunk_json TEXT NOT NULL, token_len INTEGER NOT NULL DEFAULT 0, "
        "vector BLOB NOT NULL, UNIQUE (tenant, doc_id, ordinal))"
    )
    db.commit()
    db.close()
    ix = EmbeddedIndex.open(root, dim=DIM)
    try:
        ix.write([claimed("a", "x y"), doc("b", ["b text"])])
        assert ix.copy_cosines([cid_of(ix, "a")], ALICE, 8) == {cid_of(ix, "a"): Copies([])}
    finally:
        ix.close()


def named_docs(ix: SearchIndex, texts: list[str], who: Principal = ALICE, **kw: object) -> list[str]:
    hits = ix.named(texts, who, 10, **kw)  # type: ignore[arg-type]
    chunks = ix.chunks([c for c, _ in hits])
    return [chunks[c].doc_id for c, _ in hits]


def test_named_finds_readable_pages_by_title_in_mention_order(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    ix.write(
        [
            doc("sub", ["Sub Pop is a record label", "It is based in Seattle"], title="Sub Pop"),
            doc("nir", ["a band from Aberdeen"], title="Nirvana (band)"),
            doc("hr", ["pay bands"], title="Salary Bands", groups=["hr"]),
            doc("t2", ["same title, other tenant"], title="Nirvana (band)", tenant="t2"),
            doc("low", ["a lower-case title"], title="iPod"),
        ]
    )
    text = "Bleach is the debut album by Nirvana, released by Sub Pop; see Salary Bands. Sub Popular"
    assert named_docs(ix, [text]) == ["nir", "sub"]  # parenthetical dropped; "Sub Popular" is not "Sub Pop"
    assert named_docs(ix, [text], BOB) == ["nir", "sub", "hr"]  # BOB is in hr
    assert named_docs(ix, [text], EVE) == ["t2"]  # other tenant: its own page only
    assert named_docs(ix, ["nirvana and sub pop"]) == []  # case-sensitive, as titles.names
    assert named_docs(ix, ["an iPod"]) == []  # a name must open with a capital or a digit
    first = ix.named(["Sub Pop"], ALICE, 10)
    assert [ix.chunks([c for c, _ in first])[first[0][0]].ordinal] == [0]  # the page's first chunk
    assert first[0][1] == 1.0
    assert ix.named([text], ALICE, 1) == ix.named([text], ALICE, 10)[:1]
    assert ix.named([text], ALICE, 0) == []
    assert named_docs(ix, [text], filters=SearchFilters(doc_ids=["sub"])) == ["sub"]


def test_named_follows_retitles_and_deletes(make_index: Callable[[], SearchIndex]) -> None:
    ix = make_index()
    ix.write([doc("a", ["text"], title="Old Name"), doc("b", ["text"], title="Kept Name")])
    ix.write([doc("a", ["text"], title="New Name", version=2)])
    assert named_docs(ix, ["Old Name, New Name, Kept Name"]) == ["a", "b"]  # "Old Name" names nothing now
    assert ix.delete("t1", "b") is True
    assert named_docs(ix, ["Old Name, New Name, Kept Name"]) == ["a"]
    ix2 = make_index()  # reopened
    assert named_docs(ix2, ["New Name"]) == ["a"]


def test_store_written_before_names_backfills(tmp_path: Path) -> None:
    root = tmp_path / "index"
    ix = EmbeddedIndex.open(root, dim=DIM)
    ix.write([doc("a", ["text"], title="Skin Yard"), doc("b", ["text"], title="Ostava", groups=["hr"])])
    ix.close()
    edit_store(root, "DROP TABLE names", "DELETE FROM meta WHERE key='names_v2'")
    ix = EmbeddedIndex.open(root, dim=DIM)
    try:
        assert named_docs(ix, ["Were Skin Yard and Ostava both from the U.S.?"], BOB) == ["a", "b"]
        assert named_docs(ix, ["Were Skin Yard and Ostava both from the U.S.?"]) == ["a"]
    finally:
        ix.close()


def test_store_keyed_by_an_older_name_key_is_rebuilt(tmp_path: Path) -> None:
    root = tmp_path / "index"
    ix = EmbeddedIndex.open(root, dim=DIM)
    ix.write([doc("a", ["text"], title="Will &amp; Grace"), doc("b", ["text"], title="Ostava")])
    assert named_docs(ix, ["a page about Will & Grace"]) == ["a"]  # the title's escape decoded
    ix.close()
    edit_store(  # as names_v1 stored it: the escape spelled out
        root,
        "UPDATE names SET name='Will amp Grace' WHERE doc_id='a'",
        "DELETE FROM meta WHERE key='names_v2'",
        "INSERT INTO meta (key, value) VALUES ('names_v1', '1')",
    )
    ix = EmbeddedIndex.open(root, dim=DIM)
    try:
        assert named_docs(ix, ["a page about Will & Grace"]) == ["a"]
        assert named_docs(ix, ["Will amp Grace"]) == []  # the old key is gone
        assert named_docs(ix, ["Ostava"]) == ["b"]
    finally:
        ix.close()


def test_serves_the_fact_check_and_linking_reads(make_index: Callable[[], SearchIndex]) -> None:
    """Each implementation declares both capabilities; the tests above of ``stored_vectors`` and
    ``copy_cosines`` (CheckReads) and of ``named`` (LinkReads) run on each of them."""
    ix = make_index()
    assert isinstance(ix, CheckReads) and isinstance(ix, LinkReads)
    assert check_reads(ix) is ix and link_reads(ix) is ix
