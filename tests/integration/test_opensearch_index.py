"""``OpenSearchIndex``: the ``SearchIndex`` contract against the session's real OpenSearch node
(tests/integration/opensearch_server.py), and what only this backend does: a mapping of another
layout version and an unreachable node are refused with the fix."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from opensearchpy import OpenSearch

from services.common.errors import ErrorCode, RampartError
from services.common.net import free_port
from services.common.settings import RampartSettings
from services.common.types import DocumentState
from services.retrieval import opensearch_index
from services.retrieval.config import IndexSettings, OpenSearchSettings
from services.retrieval.doc_store import ChunkWrite
from services.retrieval.index import SearchIndex, open_index
from services.retrieval.opensearch_index import OpenSearchIndex
from services.retrieval.opensearch_layout import SCHEMA_VERSION
from services.retrieval.opensearch_node import OpenSearchNode
from services.retrieval.opensearch_transport import BULK_ACTIONS
from tests.contracts.graph_reads import GraphReadsContract
from tests.contracts.search_index import ALICE, DIM, SearchIndexContract, doc, ids


def settings_for(node: OpenSearchNode, prefix: str) -> OpenSearchSettings:
    return OpenSearchSettings(url=node.url, index_prefix=prefix, timeout_s=30.0)


def drop(node: OpenSearchNode, prefix: str) -> None:
    client = OpenSearch(hosts=[node.url])
    try:
        client.indices.delete(index=f"{prefix}-*")
    finally:
        client.close()


@contextmanager
def runtime_on(
    request: pytest.FixtureRequest, settings: RampartSettings, letter: str, **models: Any
) -> Iterator[Any]:
    """A runtime on the backend ``request.param`` names ("embedded" or "opensearch"; the OpenSearch
    node starts only when asked for, its indexes under a fresh prefix opening with ``letter`` dropped
    after): what the tests held to the same promises on each backend share."""
    from services.orchestrator.runtime import Runtime

    prefix = None
    if request.param == "opensearch":
        node = request.getfixturevalue("opensearch")
        prefix = f"{letter}{uuid.uuid4().hex[:12]}"
        settings = settings.model_copy(
            update={"index": IndexSettings(backend="opensearch"), "opensearch": settings_for(node, prefix)}
        )
    rt = Runtime.open(settings, **models)
    try:
        yield rt
    finally:
        rt.close()
        if prefix is not None:
            drop(request.getfixturevalue("opensearch"), prefix)


@pytest.fixture()
def prefix(opensearch: OpenSearchNode) -> Iterator[str]:
    """A fresh index prefix per test on the shared node, dropped afterwards."""
    name = f"t{uuid.uuid4().hex[:12]}"
    yield name
    drop(opensearch, name)


class TestOpenSearchIndex(SearchIndexContract, GraphReadsContract):
    @pytest.fixture()
    def make_index(self, opensearch: OpenSearchNode, prefix: str) -> Iterator[Callable[[], SearchIndex]]:
        opened: list[OpenSearchIndex] = []

        def make() -> SearchIndex:
            for ix in opened:
                ix.close()
            opened.clear()
            opened.append(OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM))
            return opened[-1]

        yield make
        for ix in opened:
            ix.close()


def test_unreachable_node_names_the_url_and_the_command() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(RampartError) as caught:
        OpenSearchIndex.open(OpenSearchSettings(url=url, retries=1, backoff_s=0.01), dim=DIM)
    assert caught.value.code is ErrorCode.UNAVAILABLE
    assert url in caught.value.message and "rampart opensearch up" in caught.value.message


def test_mapping_of_another_version_points_to_migrate(opensearch: OpenSearchNode, prefix: str) -> None:
    ix = OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM)
    try:  # an index as an older Rampart would have left it: layout version 0 behind the alias
        ix.client.indices.delete(index=f"{prefix}-chunks-v{SCHEMA_VERSION}")
        ix.client.indices.create(
            index=f"{prefix}-chunks-v0",
            body={"mappings": {"_meta": {"rampart_schema": 0}}, "aliases": {f"{prefix}-chunks": {}}},
        )
    finally:
        ix.close()
    with pytest.raises(RampartError, match="rampart index migrate") as caught:
        OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM)
    assert caught.value.code is ErrorCode.FAILED_PRECONDITION
    assert f"{prefix}-chunks-v0" in caught.value.message and "version 0" in caught.value.message


def test_other_dimension_or_embedder_is_refused(opensearch: OpenSearchNode, prefix: str) -> None:
    OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM, model_id="model-a").close()
    with pytest.raises(RampartError, match="holds 16-d vectors"):
        OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM * 2)
    with pytest.raises(RampartError, match="built with embedder model-a"):
        OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM, model_id="model-b")
    OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM, model_id="model-a").close()


def test_backend_switch_opens_it(opensearch: OpenSearchNode, prefix: str, tmp_path: Path) -> None:
    settings = RampartSettings(
        data_dir=tmp_path / "data",
        index=IndexSettings(backend="opensearch"),
        opensearch=settings_for(opensearch, prefix),
    )
    ix = open_index(settings, DIM, "model-a")
    try:
        assert isinstance(ix, OpenSearchIndex) and ix.chunks_alias == f"{prefix}-chunks"
    finally:
        ix.close()
    assert not (tmp_path / "data" / "index").exists()  # nothing embedded was opened


def test_bulk_item_errors_fail_their_own_document(opensearch: OpenSearchNode, prefix: str) -> None:
    ix = OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM)
    try:
        ix.write([doc("keep", ["old words"])])
        good = doc("good", ["alpha words"])
        bad = doc("keep", ["new words"], version=2)
        broken = ChunkWrite(bad.chunks[0].chunk, 2, np.ones(DIM // 2, dtype=np.float32))  # wrong dimension
        bad = dataclasses.replace(bad, chunks=[broken])
        with pytest.raises(RampartError, match="refused 1 of 2 documents") as caught:
            ix.write([good, bad])
        assert caught.value.details["failed"] == ["t1/keep"]
        assert ix.status("t1", "good").state is DocumentState.INDEXED  # type: ignore[union-attr]
        failed = ix.status("t1", "keep")
        assert failed is not None and failed.state is DocumentState.FAILED
        assert failed.error is not None and "version 2" in failed.error and "dimension" in failed.error
        assert ids(ix.bm25("words", ALICE, 10), ix) == {"good", "keep"}  # keep's version 1 still serves
        assert ids(ix.bm25("new", ALICE, 10), ix) == set()
        assert ix.stats()["chunks"] == 2
    finally:
        ix.close()


def test_token_lengths_batch_splits_texts_outside_the_basic_plane(
    opensearch: OpenSearchNode, prefix: str
) -> None:
    """One _analyze call assigns tokens to texts by offset, which Java counts in UTF-16 units."""
    ix = OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM)
    try:
        texts = ["emoji 😀😀 first text", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 words here", "", "plain words at the end"]
        assert ix.token_lengths(texts) == [ix.token_length(t) for t in texts]
        assert ix.token_lengths(texts)[3] == 3  # "at", "the" are stop words
    finally:
        ix.close()


def test_a_write_larger_than_one_bulk_request_is_searchable_when_it_returns(
    opensearch: OpenSearchNode, prefix: str
) -> None:
    ix = OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM)
    try:
        n = BULK_ACTIONS + 100
        ix.write([doc(f"d{i}", [f"bulk words number{i}"]) for i in range(n)])
        assert ix.stats() == {"chunks": n, "documents_indexed": n}
        assert len(ix.bm25("bulk words", ALICE, n + 10)) == n
        ix.write([doc(f"d{i}", [f"second words number{i}"], version=2) for i in range(n)])
        assert ix.stats()["chunks"] == n and ix.bm25("bulk", ALICE, 10) == []
    finally:
        ix.close()


def test_token_lengths_past_the_nodes_analyze_limit(opensearch: OpenSearchNode, prefix: str) -> None:
    """A batch of more tokens than one _analyze request may produce (10,000): split, same counts."""
    ix = OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM)
    try:
        texts = [" ".join(f"word{i}x{j}" for j in range(400)) for i in range(40)]  # 16,000 tokens
        assert ix.token_lengths(texts) == [400] * 40
    finally:
        ix.close()


def test_entity_postings_page_past_one_search_and_stop_at_the_limit(
    opensearch: OpenSearchNode, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A limit past what one aggregation returns per key takes the multi-search, and past one
    search's window (``index.max_result_window``, 10,000) pages on with ``search_after``: both shrunk
    to 2 here, 5 mentions are read in three pages, in chunk-id order, as the aggregation reads them."""
    aggregated = None
    ix = OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM)
    try:
        ix.write([doc(f"d{i}", [f"tokd{i}"], entities=[("hub",)]) for i in range(5)])
        ix.write([doc("lone", ["toklone"], entities=[("lone",)])])
        aggregated = ix.entity_postings(["hub", "lone"], ALICE, 100)
    finally:
        ix.close()
    monkeypatch.setattr(opensearch_index, "POSTINGS_TOP_HITS", 2)
    monkeypatch.setattr(opensearch_index, "POSTINGS_PAGE", 2)
    ix = OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM)
    try:
        every = ix.entity_postings(["hub", "lone"], ALICE, 100)
        assert (
            every == aggregated
            and len(every["hub"]) == 5
            and every["hub"] == sorted(every["hub"])
            and len(every["lone"]) == 1
        )
        assert ix.entity_postings(["hub"], ALICE, 3) == {"hub": every["hub"][:3]}
        assert ix.entity_postings(["hub"], ALICE, 4) == {"hub": every["hub"][:4]}
    finally:
        ix.close()


@pytest.mark.parametrize("path", ["aggregation", "multi-search"])
@pytest.mark.parametrize(
    "partial", [{"timed_out": True}, {"_shards": {"total": 2, "successful": 1, "failed": 1}}]
)
def test_entity_postings_refuse_partial_results(
    opensearch: OpenSearchNode,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    path: str,
    partial: dict[str, object],
) -> None:
    """A postings search that timed out or lost a shard fails the read (UNAVAILABLE naming the index),
    like every other search: a walk on part of the graph would look complete."""
    if path == "multi-search":
        monkeypatch.setattr(opensearch_index, "POSTINGS_TOP_HITS", 2)
    ix = OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM)
    try:
        ix.write([doc("a", ["toka"], entities=[("key",)])])
        search, msearch = ix.client.search, ix.client.msearch

        def lossy_search(**kw: Any) -> Any:
            return {**search(**kw), **partial}

        def lossy_msearch(**kw: Any) -> Any:
            resp = msearch(**kw)
            resp["responses"][0].update(partial)
            return resp

        monkeypatch.setattr(ix.client, "search", lossy_search)
        monkeypatch.setattr(ix.client, "msearch", lossy_msearch)
        with pytest.raises(RampartError, match="partial results") as caught:
            ix.entity_postings(["key"], ALICE, 10)
        assert caught.value.code is ErrorCode.UNAVAILABLE and ix.chunks_alias in caught.value.message
    finally:
        ix.close()
