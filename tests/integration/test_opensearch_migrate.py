"""``rampart index migrate`` on the session's real OpenSearch node: an index of the previous layout
(v1, rebuilt here as that Rampart left it) is refused, migrated, and then opens with everything it
held; searches keep answering while it runs; the embedded backend says there is nothing to do."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opensearchpy import OpenSearch

from services.common.errors import ErrorCode, RampartError
from services.retrieval.config import IndexSettings
from services.retrieval.opensearch_index import OpenSearchIndex
from services.retrieval.opensearch_layout import SCHEMA_VERSION, chunks_body, documents_body, meta_body
from services.retrieval.opensearch_migrate import migrate
from services.retrieval.opensearch_node import OpenSearchNode
from services.retrieval.opensearch_transport import connect
from tests.conftest import flat
from tests.contracts.search_index import ALICE, DIM, doc, ids, vec
from tests.integration.opensearch_server import rampart_cli
from tests.integration.test_opensearch_index import drop, settings_for

V2_FIELDS = ("writer", "lease_until", "stale_cids")  # what layout v2 added to the documents index
V3_FIELDS = ("entities",)  # what layout v3 added to the chunks index


@pytest.fixture()
def prefix(opensearch: OpenSearchNode) -> Iterator[str]:
    name = f"m{uuid.uuid4().hex[:12]}"
    yield name
    drop(opensearch, name)


def v1_body(kind: str, node: OpenSearchNode, prefix: str, meta: dict[str, Any]) -> dict[str, Any]:
    settings = settings_for(node, prefix)
    if kind == "chunks":
        body = chunks_body(settings, IndexSettings(), DIM)
        for name in V3_FIELDS:
            del body["mappings"]["properties"][name]
    elif kind == "documents":
        body = documents_body(settings)
        props = body["mappings"]["properties"]
        for name in V2_FIELDS:
            del props[name]
        props["pending_cids"] = {"type": "long", "index": False, "doc_values": False}
    else:
        body = meta_body(settings)
    body["mappings"]["_meta"] = {**meta, "rampart_schema": 1}
    return body


def downgrade_to_v1(node: OpenSearchNode, prefix: str) -> None:
    """Rebuild the prefix's indexes as layout v1 (what the first OpenSearch Rampart wrote), with their
    documents, behind the same aliases."""
    client = OpenSearch(hosts=[node.url])
    strip = {
        kind: "".join(f"ctx._source.remove('{f}');" for f in fields)
        for kind, fields in (("documents", V2_FIELDS), ("chunks", V3_FIELDS))
    }
    try:
        for kind in ("chunks", "documents", "meta"):
            alias, current = f"{prefix}-{kind}", f"{prefix}-{kind}-v{SCHEMA_VERSION}"
            meta = client.indices.get_mapping(index=current)[current]["mappings"].get("_meta", {})
            client.indices.create(index=f"{alias}-v1", body=v1_body(kind, node, prefix, meta))
            body: dict[str, Any] = {"source": {"index": current}, "dest": {"index": f"{alias}-v1"}}
            if kind in strip:
                body["script"] = {"source": strip[kind], "lang": "painless"}
            client.reindex(body=body, params={"refresh": "true"})
            client.indices.update_aliases(
                body={
                    "actions": [
                        {"remove": {"index": current, "alias": alias}},
                        {"add": {"index": f"{alias}-v1", "alias": alias}},
                    ]
                }
            )
            client.indices.delete(index=current)
    finally:
        client.close()


def rampart(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return rampart_cli(env, "index", *args)


def test_an_index_of_the_previous_layout_is_refused_then_migrated(
    opensearch: OpenSearchNode, prefix: str
) -> None:
    settings = settings_for(opensearch, prefix)
    ix = OpenSearchIndex.open(settings, dim=DIM, model_id="model-a")
    ix.write(
        [
            doc("a", ["alpha words", "more alpha"], groups=["eng"], entities=[("alpha",), ()]),
            doc("b", ["beta words"], title="Beta Page"),
        ]
    )
    before = (ix.bm25("words", ALICE, 10), ix.dense(vec("alpha words"), ALICE, 10), ix.stats())
    ix.close()
    downgrade_to_v1(opensearch, prefix)
    with pytest.raises(RampartError, match="rampart index migrate") as caught:
        OpenSearchIndex.open(settings, dim=DIM, model_id="model-a")
    assert (
        caught.value.code is ErrorCode.FAILED_PRECONDITION and f"{prefix}-chunks-v1" in caught.value.message
    )

    env = {"RAMPART_INDEX__BACKEND": "opensearch", "RAMPART_OPENSEARCH__URL": opensearch.url}
    env["RAMPART_OPENSEARCH__INDEX_PREFIX"] = prefix
    done = rampart(env, "migrate")
    assert done.returncode == 0, done.stdout + done.stderr
    text = flat(done.stdout + done.stderr)
    assert (
        f"{prefix}-chunks → {prefix}-chunks-v{SCHEMA_VERSION}: 3 documents copied from {prefix}-chunks-v1"
        in text
    )
    assert "migrated" in text and f"deleted: {prefix}-chunks-v1" in text

    ix = OpenSearchIndex.open(settings, dim=DIM, model_id="model-a")  # the embedder recorded was copied
    try:
        assert (ix.bm25("words", ALICE, 10), ix.dense(vec("alpha words"), ALICE, 10), ix.stats()) == before
        assert ix.named(["Beta Page"], ALICE, 5) and ix.status("t1", "b").state.value == "indexed"  # type: ignore[union-attr]
        # the copy cannot compute mentions: a chunk of the old layout has none until re-ingested
        assert ix.entity_postings(["alpha"], ALICE, 10) == {}
        ix.write([doc("a", ["gamma words"], version=2, entities=[("gamma",)])])  # repair fields and all
        assert ids(ix.bm25("alpha", ALICE, 10), ix) == set() and ix.stats()["chunks"] == 2
        assert list(ix.entity_postings(["alpha", "gamma"], ALICE, 10)) == ["gamma"]
    finally:
        ix.close()
    again = rampart(env, "migrate")
    assert again.returncode == 0 and f"already at layout v{SCHEMA_VERSION}" in flat(
        again.stdout + again.stderr
    )
    client = OpenSearch(hosts=[opensearch.url])
    try:
        assert not client.indices.exists(index=f"{prefix}-chunks-v1")
    finally:
        client.close()


@pytest.mark.parametrize("keep_old", [False, True], ids=["delete-old", "keep-old"])
def test_searches_keep_answering_during_a_migration(
    opensearch: OpenSearchNode, prefix: str, keep_old: bool
) -> None:
    settings = settings_for(opensearch, prefix)
    ix = OpenSearchIndex.open(settings, dim=DIM)
    n = 600
    ix.write([doc(f"d{i}", [f"common words number{i}"]) for i in range(n)])
    ix.close()
    downgrade_to_v1(opensearch, prefix)
    # a process that opened the index before the migration: it searches through the aliases
    searcher = OpenSearchIndex(connect(settings), DIM, settings, IndexSettings())
    results: list[tuple[float, int, int]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def search() -> None:
        while not stop.is_set():
            try:
                bm25 = len(searcher.bm25("common", ALICE, 10))
                dense = len(searcher.dense(vec("common words"), ALICE, 10))
                results.append((time.monotonic(), bm25, dense))
            except BaseException as exc:
                errors.append(exc)

    thread = threading.Thread(target=search)
    thread.start()
    try:
        time.sleep(0.5)
        began = time.monotonic()
        report = migrate(settings, IndexSettings(), keep_old=keep_old)
        ended = time.monotonic()
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join()
        searcher.close()
    assert errors == []
    during = [r for r in results if began <= r[0] <= ended]
    assert len(during) >= 5, (len(during), ended - began)
    assert all(r[1:] == (10, 10) for r in results)  # every search answered in full, before, during, after
    old = [f"{prefix}-{k}-v1" for k in ("chunks", "documents", "meta")]
    assert report.swapped and (report.kept, report.deleted) == ((old, []) if keep_old else ([], old))
    assert [s.documents for s in report.steps] == [n, n, 1]
    client = OpenSearch(hosts=[opensearch.url])
    current = f"{prefix}-chunks-v{SCHEMA_VERSION}"
    try:
        assert set(client.indices.get_alias(name=f"{prefix}-chunks")) == {current}
        assert client.indices.exists(index=old[0]) is keep_old
        if keep_old:  # out of the alias, and it takes no writes
            blocks = client.indices.get_settings(index=old[0])[old[0]]["settings"]
            assert blocks["index"]["blocks"]["write"] == "true"
    finally:
        client.close()


def test_a_write_during_a_migration_is_refused_as_unavailable_not_lost(
    opensearch: OpenSearchNode, prefix: str
) -> None:
    """Writes are blocked on the old index while it is copied: a write then fails (ingest retries
    UNAVAILABLE), it never lands where the copy no longer looks."""
    settings = settings_for(opensearch, prefix)
    ix = OpenSearchIndex.open(settings, dim=DIM)
    try:
        ix.client.indices.put_settings(
            index=f"{prefix}-chunks-v{SCHEMA_VERSION}", body={"index.blocks.write": True}
        )
        with pytest.raises(RampartError, match="rampart index migrate") as caught:
            ix.write([doc("a", ["alpha"])])
        assert caught.value.code is ErrorCode.UNAVAILABLE
        ix.client.indices.put_settings(
            index=f"{prefix}-chunks-v{SCHEMA_VERSION}", body={"index.blocks.write": False}
        )
        ix.write([doc("a", ["alpha"])])  # the repair settled the refused write first
        assert ids(ix.bm25("alpha", ALICE, 10), ix) == {"a"} and ix.stats()["chunks"] == 1
    finally:
        ix.close()


def test_embedded_backend_has_nothing_to_migrate(tmp_path: Path) -> None:
    done = rampart({"RAMPART_INDEX__BACKEND": "embedded", "RAMPART_DATA_DIR": str(tmp_path)}, "migrate")
    assert done.returncode == 0, done.stdout + done.stderr
    text = flat(done.stdout + done.stderr)
    assert "nothing to migrate: the embedded index" in text and "RAMPART_INDEX__BACKEND=opensearch" in text
