"""The ingest journal: an accepted batch is on disk (fsync'd) before the caller hears "accepted".

One SQLite row per batch (the documents as JSON, binary content included as its base64), in WAL mode
with ``synchronous=FULL``: the commit that acknowledges a batch has reached the disk, and a torn write
(a crash mid-commit) is rolled back on the next open, so a half batch can never be read back. States
go ``queued`` → ``done`` (results kept for ``keep_done_s``, then pruned). Bounded: past
``max_batches`` queued batches or ``max_bytes`` queued bytes, :meth:`append` refuses with
``RATE_LIMITED`` rather than letting a stalled index fill the disk.

Usage::

    journal = IngestJournal.open(settings.ingest_journal_dir() / "journal.sqlite3", max_batches=1000,
                                 max_bytes=512 << 20, keep_done_s=3600)
    batch_id = journal.append(docs)            # durable from here on
    for batch in journal.pending(): ...        # arrival order, after a restart too
    journal.mark_done(batch_id, results)
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from services.common.errors import ErrorCode, RampartError
from services.common.sqlite_tx import immediate_transaction
from services.common.types import Document
from services.ingest.service import IngestResult

SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    state TEXT NOT NULL CHECK (state IN ('queued', 'done')),
    created_at REAL NOT NULL,
    finished_at REAL,
    size_bytes INTEGER NOT NULL,
    documents BLOB NOT NULL,
    trace TEXT NOT NULL DEFAULT '{}',
    results BLOB
);
CREATE INDEX IF NOT EXISTS batches_state ON batches (state, id);
"""

_DOCS = TypeAdapter(list[Document])
_RESULTS = TypeAdapter(list[IngestResult])


@dataclass(frozen=True)
class JournaledBatch:
    id: int
    created_at: float
    documents: list[Document]
    trace: dict[str, str] = field(default_factory=dict)  # W3C context of the request that sent it


@dataclass(frozen=True)
class JournalStats:
    queued_batches: int
    queued_bytes: int
    done_batches: int


class IngestJournal:
    """Thread-safe: gRPC handler threads append, the one ingest worker marks batches done."""

    def __init__(
        self, db: sqlite3.Connection, path: Path, *, max_batches: int, max_bytes: int, keep_done_s: float
    ) -> None:
        self._db = db
        self.path = path
        self.max_batches = max_batches
        self.max_bytes = max_bytes
        self.keep_done_s = keep_done_s
        self._lock = threading.Lock()
        row = db.execute(
            "SELECT COUNT(*), COALESCE(SUM(size_bytes), 0) FROM batches WHERE state='queued'"
        ).fetchone()
        self._queued_batches, self._queued_bytes = int(row[0]), int(row[1])
        self._last_prune = 0.0

    @classmethod
    def open(cls, path: Path, *, max_batches: int, max_bytes: int, keep_done_s: float) -> IngestJournal:
        """Open (or create) the journal file; a torn last write is rolled back by SQLite here."""
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30.0)
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            db.execute("PRAGMA synchronous=FULL")  # fsync on every commit: an ack means on disk
            db.executescript(SCHEMA)
        except sqlite3.Error as exc:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"cannot open the ingest journal {path}: {exc}; check the directory is writable "
                "(RAMPART_INGEST_SERVICE__JOURNAL_DIR)",
            ) from exc
        if str(mode).lower() != "wal":
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"the ingest journal {path} cannot use WAL mode (got {mode!r}); put "
                "RAMPART_INGEST_SERVICE__JOURNAL_DIR on a local filesystem",
            )
        return cls(db, path, max_batches=max_batches, max_bytes=max_bytes, keep_done_s=keep_done_s)

    def _tx(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return immediate_transaction(self._db, self._lock)

    def append(self, docs: Sequence[Document], trace: Mapping[str, str] | None = None) -> int:
        """Persist a batch; returns its id once the commit is on disk. Refuses past the bounds.

        ``trace`` (W3C headers of the submitting request) lets the processing, later and on another
        thread or after a restart, continue that request's trace."""
        blob = _DOCS.dump_json(list(docs))
        size = len(blob)
        with self._tx() as db:
            if self._queued_batches + 1 > self.max_batches:
                raise RampartError(
                    ErrorCode.RATE_LIMITED,
                    f"{self._queued_batches} ingest batches are already queued, the limit is "
                    f"{self.max_batches} (RAMPART_INGEST_SERVICE__JOURNAL_MAX_BATCHES); retry later",
                    queued_batches=self._queued_batches,
                )
            if self._queued_bytes + size > self.max_bytes:
                raise RampartError(
                    ErrorCode.RATE_LIMITED,
                    f"{self._queued_bytes} bytes of documents are queued and this batch adds {size}, the "
                    f"limit is {self.max_bytes} (RAMPART_INGEST_SERVICE__JOURNAL_MAX_BYTES); retry later "
                    "or send smaller batches",
                    queued_bytes=self._queued_bytes,
                )
            cur = db.execute(
                "INSERT INTO batches (state, created_at, size_bytes, documents, trace) "
                "VALUES ('queued', ?, ?, ?, ?)",
                (time.time(), size, blob, json.dumps(dict(trace or {}))),
            )
            batch_id = int(cur.lastrowid or 0)
            self._queued_batches += 1
            self._queued_bytes += size
        return batch_id

    def pending(self) -> list[JournaledBatch]:
        """Queued batches in arrival order (what a restart replays)."""
        with self._lock:
            rows = self._db.execute(
                "SELECT id, created_at, documents, trace FROM batches WHERE state='queued' ORDER BY id"
            ).fetchall()
        return [self._batch(int(r[0]), float(r[1]), r[2], r[3]) for r in rows]

    def mark_done(self, batch_id: int, results: Sequence[IngestResult]) -> None:
        """Record a batch's results; it is no longer replayed. Prunes old done rows now and then."""
        blob = _RESULTS.dump_json(list(results))
        now = time.time()
        with self._tx() as db:
            row = db.execute("SELECT size_bytes, state FROM batches WHERE id=?", (batch_id,)).fetchone()
            if row is None or row[1] != "queued":
                return
            db.execute(
                "UPDATE batches SET state='done', finished_at=?, results=?, documents=x'' WHERE id=?",
                (now, blob, batch_id),
            )
            self._queued_batches -= 1
            self._queued_bytes -= int(row[0])
        if now - self._last_prune > min(60.0, self.keep_done_s):
            self.prune(now - self.keep_done_s)

    def results(self, batch_id: int) -> list[IngestResult] | None:
        """A done batch's results (``None`` while queued, or once pruned)."""
        with self._lock:
            row = self._db.execute(
                "SELECT results FROM batches WHERE id=? AND state='done'", (batch_id,)
            ).fetchone()
        return None if row is None else _RESULTS.validate_json(row[0])

    def prune(self, finished_before: float) -> int:
        """Delete done batches finished before ``finished_before`` (epoch seconds); returns how many."""
        with self._tx() as db:
            cur = db.execute("DELETE FROM batches WHERE state='done' AND finished_at < ?", (finished_before,))
            self._last_prune = time.time()
            return cur.rowcount

    def stats(self) -> JournalStats:
        with self._lock:
            done = int(self._db.execute("SELECT COUNT(*) FROM batches WHERE state='done'").fetchone()[0])
            return JournalStats(self._queued_batches, self._queued_bytes, done)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _batch(self, batch_id: int, created_at: float, blob: bytes, trace: str = "{}") -> JournaledBatch:
        try:
            docs = _DOCS.validate_json(blob)
        except ValidationError as exc:  # only a schema change between versions could cause this
            raise RampartError(
                ErrorCode.INTERNAL,
                f"journaled batch {batch_id} in {self.path} no longer validates ({exc.error_count()} "
                "errors); fix the document schema or move the journal aside",
            ) from exc
        try:
            carrier = {str(k): str(v) for k, v in json.loads(trace).items()}
        except (ValueError, AttributeError):  # a trace is a nicety: never lose a batch over it
            carrier = {}
        return JournaledBatch(batch_id, created_at, docs, carrier)
