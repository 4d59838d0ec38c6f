"""The ``SearchIndex`` contract (services/retrieval/index.py): what retrieval, ingest and the
fact-check may rely on from any index. Subclass :class:`SearchIndexContract` in the implementation's
own test file and provide ``make_index`` (tests/README.md).

Vectors here are hand-made inputs (the index stores whatever it is given); the real embedder is
exercised in the pipeline and gateway tests.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable

import numpy as np
import pytest

from services.common.errors import RampartError
from services.common.types import Acl, Chunk, DocumentState, Principal, SearchFilters
from services.retrieval.capabilities import CheckReads, check_reads
from services.retrieval.doc_store import ChunkWrite, DocumentWrite
from services.retrieval.index import SearchIndex
from services.retrieval.links.leads import copy_leads
from services.retrieval.links.reads import LinkReads, link_reads

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
    entities: list[tuple[str, ...]] | None = None,
) -> DocumentWrite:
    chunks = [
        ChunkWrite(
            Chunk(chunk_id=f"{doc_id}#{i}", doc_id=doc_id, tenant=tenant, ordinal=i, text=t, version=version),
            analyze(t),
            vec(t),
            vec(claims[i]) if claims is not None else None,
            entities[i] if entities is not None else (),
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


def ids(hits: list[tuple[int, float]], index: SearchIndex, who: Principal = ALICE) -> set[str]:
    """Documents of ``hits``, read as ``who`` (the searcher: a remote index returns only its chunks)."""
    return {c.doc_id for c in index.chunks([h[0] for h in hits], who).values()}


def claimed(doc_id: str, claim: str, **kw: object) -> DocumentWrite:
    """A one-chunk document whose claim vector is ``claim``'s (its dense vector is its own text's)."""
    return doc(doc_id, [f"tok{doc_id} says {claim}"], claims=[claim], **kw)  # type: ignore[arg-type]


def cid_of(ix: SearchIndex, doc_id: str, ordinal: int = 0) -> int:
    hits = ix.bm25(f"tok{doc_id}", ALICE, 50)
    return next(
        c
        for c, ch in ix.chunks([h[0] for h in hits], ALICE).items()
        if ch.doc_id == doc_id and ch.ordinal == ordinal
    )


def named_docs(ix: SearchIndex, texts: list[str], who: Principal = ALICE, **kw: object) -> list[str]:
    hits = ix.named(texts, who, 10, **kw)  # type: ignore[arg-type]
    chunks = ix.chunks([c for c, _ in hits], who)
    return [chunks[c].doc_id for c, _ in hits]


class SearchIndexContract:
    """Every ``SearchIndex`` keeps these promises: writes are upserts, every read is scoped to the
    principal's tenant and ACL inside the search (never filtered after top-k), deletes and re-titles
    reach every read, and a reopened index holds all it acknowledged.

    Provide ``make_index``: a callable that opens the implementation on one store, closing the handle
    it returned before (so a second call is a reopen), and closes the last one at teardown.
    """

    @pytest.fixture()
    def make_index(self) -> Callable[[], SearchIndex]:
        raise NotImplementedError(
            f"{type(self).__name__} must provide the make_index fixture: a callable (re)opening the index "
            "under test on one store (tests/README.md)"
        )

    def test_write_then_search_both_retrievers(self, make_index: Callable[[], SearchIndex]) -> None:
        ix = make_index()
        ix.write(
            [doc("a", ["parental leave is sixteen weeks"]), doc("b", ["the vpn needs a hardware token"])]
        )
        assert ids(ix.bm25("parental leave", ALICE, 10), ix) == {"a"}
        dense = ix.dense(vec("parental leave weeks"), ALICE, 1)
        assert ids(dense, ix) == {"a"}
        assert ix.status("t1", "a").state is DocumentState.INDEXED  # type: ignore[union-attr]

    def test_acl_and_tenant_filter_inside_both_searches(self, make_index: Callable[[], SearchIndex]) -> None:
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
        assert ids(ix.bm25("salary", BOB, 10), ix, BOB) == {"pub", "hr"}
        assert ids(ix.bm25("salary", EVE, 10), ix, EVE) == {"other"}
        assert ids(ix.dense(vec("salary bands"), ALICE, 10), ix) == {"pub", "mine"}
        assert ids(ix.dense(vec("salary bands"), BOB, 10), ix, BOB) == {"pub", "hr"}
        # Asking for exactly one result still finds a readable one: filtering is not done after top-k.
        assert ids(ix.dense(vec("salary bands for engineers"), ALICE, 1), ix) <= {"pub", "mine"}
        assert len(ix.dense(vec("salary bands for engineers"), ALICE, 1)) == 1

    def test_update_replaces_chunks_and_acl(self, make_index: Callable[[], SearchIndex]) -> None:
        ix = make_index()
        ix.write([doc("a", ["old text about rockets"], groups=["hr"])])
        ix.write([doc("a", ["new text about boats"], version=2)])
        assert ix.bm25("rockets", BOB, 10) == []
        assert ids(ix.bm25("boats", ALICE, 10), ix) == {"a"}  # ACL widened to everyone
        assert ix.current("t1", "a")[0] == 2  # type: ignore[index]
        assert ix.stats()["chunks"] == 1

    def test_status_names_the_readers(self, make_index: Callable[[], SearchIndex]) -> None:
        """The stored ACL as tokens, for the gateway's write ACL; it follows an update."""
        ix = make_index()
        ix.write([doc("a", ["salary bands"], groups=["hr"]), doc("b", ["notes"], users=["alice"])])
        assert ix.status("t1", "a").readers == ["g:hr"]  # type: ignore[union-attr]
        assert ix.status("t1", "b").readers == ["u:alice"]  # type: ignore[union-attr]
        ix.write([doc("a", ["salary bands"], groups=["hr", "exec"], version=2)])
        assert ix.status("t1", "a").readers == ["g:exec", "g:hr"]  # type: ignore[union-attr]

    def test_bm25_statistics_are_per_tenant(self, make_index: Callable[[], SearchIndex]) -> None:
        """Another tenant writing a rare word (and growing the index) leaves this tenant's BM25
        scores as they were: the scores of a tenant's chunks come from its own statistics."""
        ix = make_index()
        ix.write([doc("other-hello", ["welcome to tenant two"], tenant="t2")])
        ix.write(
            [
                doc("a", ["inspect the zorblax valve monthly"]),
                doc("b", ["the pump seal and the zorblax zorblax assembly get hot"]),
                doc("c", ["valve questions and answers for the cooling loop"]),
            ]
        )
        before = {q: ix.bm25(q, ALICE, 10) for q in ("zorblax", "zorblax valve")}
        ix.write(
            [doc(f"t2-{i}", ["zorblax " * (i + 2) + "quarterly figures"], tenant="t2") for i in range(6)]
        )
        after = {q: ix.bm25(q, ALICE, 10) for q in ("zorblax", "zorblax valve")}
        assert after == before

    def test_delete_removes_from_every_search(self, make_index: Callable[[], SearchIndex]) -> None:
        ix = make_index()
        ix.write([doc("a", ["alpha beta"]), doc("b", ["alpha gamma"])])
        assert ix.delete("t1", "a") is True
        assert ids(ix.bm25("alpha", ALICE, 10), ix) == {"b"}
        assert ids(ix.dense(vec("alpha beta"), ALICE, 10), ix) == {"b"}
        assert ix.status("t1", "a").state is DocumentState.DELETED  # type: ignore[union-attr]
        assert ix.delete("t1", "a") is False
        assert ix.delete("t2", "b") is False  # other tenant's id space

    def test_searches_return_the_recorded_version_only(self, make_index: Callable[[], SearchIndex]) -> None:
        """A search returns a document's chunks of the version its entry records as searchable: while a
        newer version is being ingested (``pending``) or after it failed, the old one alone; after a
        replacement the new one alone; after a delete nothing (docs/opensearch.md, "What a search sees")."""
        ix = make_index()
        ix.write([doc("a", ["alpha oldword one", "alpha oldword two"]), doc("b", ["alpha other"])])
        for state in (DocumentState.PENDING, DocumentState.FAILED):
            ix.mark("t1", "a", 2, state, error="embedding failed" if state is DocumentState.FAILED else None)
            assert ids(ix.bm25("oldword", ALICE, 10), ix) == {"a"}
            assert len(ix.bm25("oldword", ALICE, 10)) == 2
            assert ids(ix.dense(vec("alpha oldword one"), ALICE, 10), ix) == {"a", "b"}
        ix.write([doc("a", ["alpha newword"], version=2)])
        assert ix.bm25("oldword", ALICE, 10) == []
        assert ids(ix.bm25("newword", ALICE, 10), ix) == {"a"}
        assert len(ix.dense(vec("alpha oldword one"), ALICE, 10)) == 2  # a's one chunk, b's
        assert ix.delete("t1", "a") is True
        assert ix.bm25("alpha", ALICE, 10) == ix.bm25(
            "alpha", ALICE, 10, filters=SearchFilters(doc_ids=["b"])
        )
        assert ids(ix.dense(vec("alpha newword"), ALICE, 10), ix) == {"b"}

    def test_filters_apply_inside(self, make_index: Callable[[], SearchIndex]) -> None:
        ix = make_index()
        ix.write(
            [doc("a", ["alpha"], metadata={"dept": "hr"}), doc("b", ["alpha"], metadata={"dept": "eng"})]
        )
        f = SearchFilters(metadata={"dept": "eng"})
        assert ids(ix.bm25("alpha", ALICE, 10, filters=f), ix) == {"b"}
        assert ids(ix.dense(vec("alpha"), ALICE, 10, filters=f), ix) == {"b"}
        assert ids(ix.bm25("alpha", ALICE, 10, filters=SearchFilters(doc_ids=["a"])), ix) == {"a"}

    def test_restrict_scores_only_given_chunks(self, make_index: Callable[[], SearchIndex]) -> None:
        ix = make_index()
        ix.write([doc("a", ["alpha beta"]), doc("b", ["alpha"]), doc("c", ["gamma"])])
        all_hits = dict(ix.bm25("alpha", ALICE, 10))
        b_cid = next(c for c, ch in ix.chunks(list(all_hits), ALICE).items() if ch.doc_id == "b")
        restricted = ix.bm25("alpha", ALICE, 10, restrict=[b_cid])
        assert restricted == [(b_cid, pytest.approx(all_hits[b_cid]))]

    def test_reopen_keeps_everything(self, make_index: Callable[[], SearchIndex]) -> None:
        ix = make_index()
        ix.write([doc("a", ["persisted words here"], groups=["eng"])])
        ix2 = make_index()  # closes the first
        assert ids(ix2.bm25("persisted", ALICE, 10), ix2) == {"a"}
        assert ids(ix2.dense(vec("persisted words here"), ALICE, 10), ix2) == {"a"}
        assert ix2.bm25("persisted", BOB, 10) == []

    def test_stored_vectors_are_what_was_written(self, make_index: Callable[[], SearchIndex]) -> None:
        ix = make_index()
        ix.write(
            [doc("a", ["parental leave is sixteen weeks"]), doc("b", ["the vpn needs a hardware token"])]
        )
        cids = [cid for cid, _ in ix.bm25("parental leave vpn", ALICE, 10)]
        stored = ix.stored_vectors(cids, ALICE)
        chunks = ix.chunks(cids, ALICE)
        assert set(stored) == set(cids)
        for cid in cids:
            np.testing.assert_allclose(stored[cid], vec(chunks[cid].text), rtol=1e-6)
        assert ix.stored_vectors([], ALICE) == {}

    def test_token_lengths_batch_matches_single(self, make_index: Callable[[], SearchIndex]) -> None:
        ix = make_index()
        texts = ["Parental leave is sixteen weeks.", "", "the the vpn"]
        assert ix.token_lengths(texts) == [ix.token_length(t) for t in texts]
        assert ix.token_lengths(texts)[0] > 0
        assert ix.token_lengths([]) == []

    def test_copy_cosines_count_other_readable_documents_once(
        self, make_index: Callable[[], SearchIndex]
    ) -> None:
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

    def test_copy_arrivals_are_the_close_chunks_in_write_order(
        self, make_index: Callable[[], SearchIndex]
    ) -> None:
        """``Copies.arrivals``: each closest chunk's place in the write order, parallel to the cosines —
        what the planted-copies rule's arrival test compares (docs/factcheck.md, "arrival order")."""
        ix = make_index()
        claim = "the moon is made of green cheese"
        ix.write([claimed("a", claim), claimed("b", "the moon is made of green cheese indeed")])
        ix.write([claimed("c", claim)])  # written later
        a0, b0, c0 = cid_of(ix, "a"), cid_of(ix, "b"), cid_of(ix, "c")
        got = ix.copy_cosines([a0], ALICE, 8)[a0]
        assert got.arrivals == [c0, b0]  # c holds the same claim: closest first
        assert len(got.arrivals) == len(got.cosines)
        assert a0 < c0 and b0 < c0  # a chunk written later arrives later
        ix.write([claimed("b", "the moon is made of green cheese indeed, version two")])
        assert cid_of(ix, "b") > c0  # a new version is a new arrival

    def test_copy_neighbors_are_the_close_documents_own_copies(
        self, make_index: Callable[[], SearchIndex]
    ) -> None:
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

    def test_copy_leads_read_what_the_close_documents_open_with(
        self, make_index: Callable[[], SearchIndex]
    ) -> None:
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
        got = ix.copy_cosines([a0], ALICE, 8)[a0]
        assert got.others[:2] == [cid_of(ix, "b"), cid_of(ix, "c")]  # closest first, one per document
        moon = float(vec(claim) @ vec("the moon is made of green cheese indeed"))
        far = float(vec(claim) @ vec("payroll runs on the last friday"))
        read = functools.partial(ix.chunks, principal=ALICE)
        leads = copy_leads({a0: got}, (moon + far) / 2, read)
        assert leads == {a0: ["2011 Moon Survey", ""]}  # b and c reach the cosine; c opens with no name
        assert copy_leads({a0: got}, 0.0, read) == {}  # not asked for: nothing read

    def test_claim_vectors_survive_reopen(self, make_index: Callable[[], SearchIndex]) -> None:
        ix = make_index()
        ix.write([claimed("a", "one claim"), claimed("b", "one claim")])
        a0 = cid_of(ix, "a")
        ix2 = make_index()
        assert ix2.copy_cosines([a0], ALICE, 8)[a0].cosines == [pytest.approx(1.0, abs=1e-5)]

    def test_named_finds_readable_pages_by_title_in_mention_order(
        self, make_index: Callable[[], SearchIndex]
    ) -> None:
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
        assert named_docs(ix, [text]) == [
            "nir",
            "sub",
        ]  # parenthetical dropped; "Sub Popular" is not "Sub Pop"
        assert named_docs(ix, [text], BOB) == ["nir", "sub", "hr"]  # BOB is in hr
        assert named_docs(ix, [text], EVE) == ["t2"]  # other tenant: its own page only
        assert named_docs(ix, ["nirvana and sub pop"]) == []  # case-sensitive, as titles.names
        assert named_docs(ix, ["an iPod"]) == []  # a name must open with a capital or a digit
        first = ix.named(["Sub Pop"], ALICE, 10)
        assert [ix.chunks([c for c, _ in first], ALICE)[first[0][0]].ordinal] == [0]  # the page's first chunk
        assert first[0][1] == 1.0
        assert ix.named([text], ALICE, 1) == ix.named([text], ALICE, 10)[:1]
        assert ix.named([text], ALICE, 0) == []
        assert named_docs(ix, [text], filters=SearchFilters(doc_ids=["sub"])) == ["sub"]

    def test_named_follows_retitles_and_deletes(self, make_index: Callable[[], SearchIndex]) -> None:
        ix = make_index()
        ix.write([doc("a", ["text"], title="Old Name"), doc("b", ["text"], title="Kept Name")])
        ix.write([doc("a", ["text"], title="New Name", version=2)])
        assert named_docs(ix, ["Old Name, New Name, Kept Name"]) == ["a", "b"]  # "Old Name" names nothing now
        assert ix.delete("t1", "b") is True
        assert named_docs(ix, ["Old Name, New Name, Kept Name"]) == ["a"]
        ix2 = make_index()  # reopened
        assert named_docs(ix2, ["New Name"]) == ["a"]

    def test_serves_the_fact_check_and_linking_reads(self, make_index: Callable[[], SearchIndex]) -> None:
        """Each implementation declares both capabilities; the tests above of ``stored_vectors`` and
        ``copy_cosines`` (CheckReads) and of ``named`` (LinkReads) run on each of them."""
        ix = make_index()
        assert isinstance(ix, CheckReads) and isinstance(ix, LinkReads)
        assert check_reads(ix) is ix and link_reads(ix) is ix
