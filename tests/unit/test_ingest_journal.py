"""The ingest journal: durable order, bounds, pruning, and no half batch after a torn write."""

from __future__ import annotations

import base64
import shutil
import time
from pathlib import Path

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.types import Acl, Document
from services.ingest.journal import IngestJournal
from services.ingest.service import IngestResult, Outcome


def doc(doc_id: str, text: str = "some text", version: int = 1) -> Document:
    return Document(id=doc_id, tenant="t1", acl=Acl(groups=["*"]), text=text, version=version)


def open_journal(path: Path, **limits: float) -> IngestJournal:
    opts: dict[str, float] = {"max_batches": 100, "max_bytes": 10_000_000, "keep_done_s": 3600.0}
    opts.update(limits)
    return IngestJournal.open(
        path,
        max_batches=int(opts["max_batches"]),
        max_bytes=int(opts["max_bytes"]),
        keep_done_s=opts["keep_done_s"],
    )


def test_pending_in_arrival_order_survives_reopen(tmp_path: Path) -> None:
    j = open_journal(tmp_path / "j.sqlite3")
    pdf = Document(
        id="bin",
        tenant="t1",
        acl=Acl(users=["ann"]),
        content_base64=base64.b64encode(b"%PDF-1.4 \x00\xff bytes").decode(),
        content_type="application/pdf",
        metadata={"trust": "low"},
    )
    ids = [j.append([doc("a"), doc("b")]), j.append([pdf]), j.append([doc("c", version=3)])]
    assert ids == sorted(ids)
    j.close()

    j = open_journal(tmp_path / "j.sqlite3")
    pending = j.pending()
    assert [b.id for b in pending] == ids
    assert [d.id for d in pending[0].documents] == ["a", "b"]
    assert pending[1].documents[0] == pdf  # binary content and metadata round-trip exactly
    assert pending[1].documents[0].payload() == b"%PDF-1.4 \x00\xff bytes"
    assert pending[2].documents[0].version == 3
    assert j.stats().queued_batches == 3


def test_done_batches_keep_results_then_are_pruned(tmp_path: Path) -> None:
    j = open_journal(tmp_path / "j.sqlite3")
    first, second = j.append([doc("a")]), j.append([doc("b")])
    failed = IngestResult(id="a", version=1, outcome=Outcome.FAILED, error="no text", code="invalid_argument")
    j.mark_done(first, [failed])
    assert [b.id for b in j.pending()] == [second]
    assert j.results(first) == [failed]  # the reason is kept
    assert j.results(second) is None  # still queued
    stats = j.stats()
    assert (stats.queued_batches, stats.done_batches) == (1, 1)
    assert j.prune(time.time() + 1) == 1
    assert j.results(first) is None
    j.mark_done(first, [failed])  # a second mark (replay after a crash) is a no-op
    assert j.stats().queued_batches == 1


def test_bounds_refuse_with_rate_limited_naming_the_setting(tmp_path: Path) -> None:
    j = open_journal(tmp_path / "j.sqlite3", max_batches=2)
    j.append([doc("a")])
    j.append([doc("b")])
    with pytest.raises(RampartError) as exc:
        j.append([doc("c")])
    assert exc.value.code is ErrorCode.RATE_LIMITED
    assert "JOURNAL_MAX_BATCHES" in exc.value.message
    j.mark_done(j.pending()[0].id, [])
    j.append([doc("c")])  # room again once one is processed

    small = open_journal(tmp_path / "small.sqlite3", max_bytes=2000)
    with pytest.raises(RampartError) as exc:
        small.append([doc("big", text="x" * 5000)])
    assert exc.value.code is ErrorCode.RATE_LIMITED
    assert "JOURNAL_MAX_BYTES" in exc.value.message
    assert small.pending() == []


def test_torn_write_never_yields_half_a_batch(tmp_path: Path) -> None:
    """Cut the write-ahead log at many points inside the last commit (a crash mid-fsync): the reopened
    journal holds the earlier batch whole and the last one whole or not at all."""
    live = tmp_path / "live"
    j = open_journal(live / "j.sqlite3")
    j.append([doc("first", "first batch text")])
    wal = live / "j.sqlite3-wal"
    before = wal.stat().st_size
    big = [doc(f"d{i}", " ".join(f"word{i}_{k}" for k in range(800))) for i in range(6)]  # many pages
    j.append(big)
    after = wal.stat().st_size
    assert after > before + 8192

    outcomes = set()
    for cut in [*range(before, after, max(1, (after - before) // 23)), after]:
        copy = tmp_path / f"cut-{cut}"
        copy.mkdir()
        shutil.copy(live / "j.sqlite3", copy / "j.sqlite3")
        with wal.open("rb") as src, (copy / "j.sqlite3-wal").open("wb") as dst:
            dst.write(src.read(cut))
        reopened = open_journal(copy / "j.sqlite3")
        batches = reopened.pending()
        reopened.close()
        assert [d.id for d in batches[0].documents] == ["first"]
        assert len(batches) in (1, 2)
        if len(batches) == 2:
            assert batches[1].documents == big
        outcomes.add(len(batches))
    assert outcomes == {1, 2}  # both "rolled back" and "committed" were exercised
    j.close()


def test_unwritable_location_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises((RampartError, OSError)):
        open_journal(blocker / "j.sqlite3")
