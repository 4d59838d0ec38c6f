"""``EmbeddedIndex`` (SQLite + tantivy + faiss on local disk): the ``SearchIndex`` contract with flat
and HNSW vectors, and what only the embedded index does (one process per store, the model check,
BM25 parameters, stores written by older versions, derived indexes rebuilt from the store)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from services.common.errors import RampartError
from services.retrieval.capabilities import Copies
from services.retrieval.config import IndexSettings
from services.retrieval.embedded_index import EmbeddedIndex
from services.retrieval.index import SearchIndex
from tests.contracts.graph_reads import GraphReadsContract
from tests.contracts.search_index import (
    ALICE,
    BOB,
    DIM,
    SearchIndexContract,
    cid_of,
    claimed,
    doc,
    named_docs,
)


class TestEmbeddedIndex(SearchIndexContract, GraphReadsContract):
    @pytest.fixture(params=["flat", "hnsw"])
    def make_index(
        self, request: pytest.FixtureRequest, tmp_path: Path
    ) -> Iterator[Callable[[], SearchIndex]]:
        opened: list[EmbeddedIndex] = []

        def make() -> SearchIndex:
            for ix in opened:
                ix.close()
            opened.clear()
            ix = EmbeddedIndex.open(
                tmp_path / "index", dim=DIM, settings=IndexSettings(vector_kind=request.param)
            )
            opened.append(ix)
            return ix

        yield make
        for ix in opened:
            ix.close()

    def test_claim_vectors_survive_reopen_and_rebuild(
        self, make_index: Callable[[], SearchIndex], tmp_path: Path
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
