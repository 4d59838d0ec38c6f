"""Crash repair of ``OpenSearchIndex`` writes (services/retrieval/opensearch_repair.py), on the
session's real OpenSearch node: a write dies at each of its bulk requests (before it, or after half of
its items landed), and the reopened index holds every document as its old version or its new one,
never both, never a chunk that no entry owns."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from services.common.types import DocumentState
from services.retrieval.opensearch_index import OpenSearchIndex
from services.retrieval.opensearch_node import OpenSearchNode
from services.retrieval.opensearch_transport import split_actions
from tests.contracts.search_index import ALICE, DIM, doc, ids, vec
from tests.integration.test_opensearch_index import drop, settings_for


class Crash(BaseException):
    """The process dying: no ``except Exception`` sees it, so nothing is cleaned up."""


@pytest.fixture()
def prefix(opensearch: OpenSearchNode) -> Iterator[str]:
    name = f"r{uuid.uuid4().hex[:12]}"
    yield name
    drop(opensearch, name)


def crash_at(ix: OpenSearchIndex, call: int, fraction: float) -> list[str]:
    """Make the ``call``-th bulk request (1-based) of ``ix`` send only ``fraction`` of its actions
    and then crash; returns the names of the bulk requests seen."""
    real = ix.t.bulk
    seen: list[str] = []

    def bulk(lines: list[dict[str, Any]], what: str, refresh: bool) -> list[dict[str, Any]]:
        seen.append(what)
        if len(seen) != call:
            return real(lines, what, refresh)
        actions = split_actions(lines)
        part = actions[: int(len(actions) * fraction)]
        if part:
            real([line for action in part for line in action], what, refresh)
        raise Crash(what)

    ix.t.bulk = bulk  # type: ignore[method-assign]
    return seen


OLD_A = ["apple oldword one", "apple oldword two"]
NEW_A = ["apple newword one", "apple newword two", "apple newword three"]


def batch() -> list[Any]:
    """An update of ``a`` (2 old chunks → 3 new) and a new document ``b``."""
    return [doc("a", NEW_A, version=2), doc("b", ["banana freshword"])]


# the write of batch() over an indexed a=v1 sends these bulk requests, in this order
STEPS = [
    "mark documents pending",
    "write chunks",
    "record documents",
    "delete old chunks",
    "finish documents",
]


def assert_old_or_new(ix: OpenSearchIndex) -> tuple[str, str]:
    """Each document is entirely its old or its new version, its status says which, and no chunk
    outside the served versions is left; returns (a's version, b's)."""
    old_a, new_a = ids(ix.bm25("oldword", ALICE, 10), ix), ids(ix.bm25("newword", ALICE, 10), ix)
    a_hits = len(ix.bm25("apple", ALICE, 10))
    status_a = ix.status("t1", "a")
    assert status_a is not None
    if new_a:
        assert old_a == set() and a_hits == 3 and status_a.state is DocumentState.INDEXED
        a = "new"
    else:
        assert old_a == {"a"} and a_hits == 2
        if status_a.state is DocumentState.INDEXED:  # the crash came before its pending mark
            assert status_a.version == 1
        else:
            assert status_a.state is DocumentState.FAILED and status_a.version == 2
            assert status_a.error is not None and "version 1 is still searchable" in status_a.error
        a = "old"
    b_hits = len(ix.bm25("banana", ALICE, 10))
    status_b = ix.status("t1", "b")
    if b_hits:
        assert status_b is not None and status_b.state is DocumentState.INDEXED and b_hits == 1
        b = "new"
    else:
        assert status_b is None or (
            status_b.state is DocumentState.FAILED and "before it was indexed" in (status_b.error or "")
        )
        b = "absent"
    stats = ix.stats()
    assert stats["chunks"] == a_hits + b_hits, stats  # no orphan chunk
    assert "documents_pending" not in stats, stats
    return a, b


# a crash before each request, after half of its actions, and after the last one ("after" a request
# is "before" the next)
CRASHES = [(step, f) for step in range(1, len(STEPS) + 1) for f in (0.0, 0.5)] + [(len(STEPS), 1.0)]


@pytest.mark.parametrize(
    ("step", "fraction"),
    CRASHES,
    ids=[f"{STEPS[s - 1]}-{ {0.0: 'before', 0.5: 'half', 1.0: 'after'}[f] }" for s, f in CRASHES],
)
def test_a_crash_at_any_step_leaves_each_document_old_or_new(
    opensearch: OpenSearchNode, prefix: str, step: int, fraction: float
) -> None:
    settings = settings_for(opensearch, prefix)
    ix = OpenSearchIndex.open(settings, dim=DIM)
    ix.write([doc("a", OLD_A)])
    seen = crash_at(ix, step, fraction)
    with pytest.raises(Crash):
        ix.write(batch())
    assert seen == STEPS[:step]
    ix.close()  # the crashed process's index is gone; its entries say so
    reopened = OpenSearchIndex.open(settings, dim=DIM)  # repairs on open
    try:
        a, b = assert_old_or_new(reopened)
        if step == len(STEPS) and fraction == 1.0:
            assert (a, b) == ("new", "new")  # every step landed
        if step < 3 or (step == 3 and fraction == 0.0):
            assert a == "old"  # no entry of the new version was recorded: rolled back
        reopened.write(batch())  # sending the batch again ends with both new
        assert assert_old_or_new(reopened) == ("new", "new")
    finally:
        reopened.close()


def test_the_same_writer_settles_its_own_crash_at_its_next_write(
    opensearch: OpenSearchNode, prefix: str
) -> None:
    ix = OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM)
    try:
        ix.write([doc("a", OLD_A)])
        real = ix.t.bulk
        crash_at(ix, 3, 0.0)  # new chunks written, entries not: a holds old and new chunks
        with pytest.raises(Crash):
            ix.write(batch())
        assert ix.stats()["chunks"] == 6  # a's both versions and b's chunk, until a repair
        assert len(ix.bm25("apple", ALICE, 10)) == 2  # searches see the recorded (old) version only
        ix.t.bulk = real  # type: ignore[method-assign]
        ix.write([doc("a", NEW_A, version=2)])  # the leftover is settled before this write
        assert len(ix.bm25("apple", ALICE, 10)) == 3 and ix.bm25("oldword", ALICE, 10) == []
        assert ix.stats()["chunks"] == 3  # b's chunk from the crashed write went too
        assert ix.status("t1", "b").state is DocumentState.FAILED  # type: ignore[union-attr]
    finally:
        ix.close()


def test_a_failed_write_is_settled_at_once(opensearch: OpenSearchNode, prefix: str) -> None:
    """An error between the steps (not a crash): the writer repairs before raising."""
    ix = OpenSearchIndex.open(settings_for(opensearch, prefix), dim=DIM)
    try:
        ix.write([doc("a", OLD_A)])
        real = ix.t.bulk
        calls: list[str] = []

        def failing(lines: list[dict[str, Any]], what: str, refresh: bool) -> list[dict[str, Any]]:
            calls.append(what)
            if what == "record documents":
                raise RuntimeError("connection lost")
            return real(lines, what, refresh)

        ix.t.bulk = failing  # type: ignore[method-assign]
        with pytest.raises(RuntimeError):
            ix.write(batch())
        ix.t.bulk = real  # type: ignore[method-assign]
        assert "repair: delete chunks" in calls
        assert assert_old_or_new(ix) == ("old", "absent")
    finally:
        ix.close()


def test_a_live_writer_is_left_alone_and_a_pending_mark_is_settled(
    opensearch: OpenSearchNode, prefix: str
) -> None:
    settings = settings_for(opensearch, prefix)
    writer = OpenSearchIndex.open(settings, dim=DIM)
    writer.write([doc("a", OLD_A)])
    writer.mark("t1", "a", 2, DocumentState.PENDING)  # ingest marks, then embeds: a write will follow
    other = OpenSearchIndex.open(settings, dim=DIM)  # another process opening meanwhile
    try:
        assert other.status("t1", "a").state is DocumentState.PENDING  # type: ignore[union-attr]
        writer.close()  # the writer dies before writing
        again = OpenSearchIndex.open(settings, dim=DIM)
        try:
            status = again.status("t1", "a")
            assert status is not None and status.state is DocumentState.FAILED and status.version == 2
            assert "version 1 is still searchable" in (status.error or "")
            assert ids(again.bm25("oldword", ALICE, 10), again) == {"a"}
        finally:
            again.close()
    finally:
        other.close()


@pytest.mark.parametrize("step", [2, 3, 4, 5], ids=STEPS[1:])
def test_another_reader_sees_one_version_while_a_write_is_between_its_steps(
    opensearch: OpenSearchNode, prefix: str, step: int
) -> None:
    """A write stopped after ``step - 1`` of its requests, by a writer still alive (so nothing repairs
    it): another process's searches see each document as its old version or its new one, never both
    and never a chunk of a version not yet recorded (b, new, is not searchable before its entry)."""
    settings = settings_for(opensearch, prefix)
    writer = OpenSearchIndex.open(settings, dim=DIM)
    writer.write([doc("a", OLD_A)])
    crash_at(writer, step, 0.0)
    with pytest.raises(Crash):
        writer.write(batch())
    reader = OpenSearchIndex.open(settings, dim=DIM)  # the writer is alive: its write is left as it is
    try:
        old, new = reader.bm25("oldword", ALICE, 10), reader.bm25("newword", ALICE, 10)
        apples = reader.bm25("apple", ALICE, 10)
        dense = reader.dense(vec("apple oldword one"), ALICE, 10)
        recorded = step > 3  # the new version's entry landed in "record documents"
        assert (len(old), len(new)) == ((0, 3) if recorded else (2, 0))
        assert len(apples) == len(dense) - len(reader.bm25("banana", ALICE, 10)) == len(new or old)
        assert {c for c, _ in apples} == {c for c, _ in (new or old)}
        assert len(reader.bm25("banana", ALICE, 10)) == (1 if recorded else 0)
    finally:
        reader.close()
        writer.close()
