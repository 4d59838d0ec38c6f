"""The embedded feedback store: SQLite at ``<data_dir>/feedback.sqlite3``, beside the index's database.

A file of its own rather than tables in the index's: the index is derived state that gets rebuilt,
migrated and (issue 40, point 3) rebuilt beside itself for a new embedder and swapped in, while
feedback is the users' record and must outlive every index. WAL journal with ``synchronous=FULL``:
a feedback call is acknowledged only once its events are on disk, and ``rampart feedback export`` reads
while the server writes. Impressions past their retention are purged at most once a minute, on write.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from services.common.errors import ErrorCode, RampartError
from services.common.sqlite_tx import immediate_transaction
from services.learning.feedback_store import FeedbackEvent, Impression

SCHEMA = """
CREATE TABLE IF NOT EXISTS impressions (
    tenant TEXT NOT NULL, user TEXT NOT NULL, request_id TEXT NOT NULL,
    body TEXT NOT NULL, purge_at REAL NOT NULL,
    PRIMARY KEY (tenant, user, request_id)
);
CREATE INDEX IF NOT EXISTS impressions_purge ON impressions (purge_at);
CREATE TABLE IF NOT EXISTS feedback (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL, time REAL NOT NULL, body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS feedback_tenant_time ON feedback (tenant, time);
CREATE INDEX IF NOT EXISTS feedback_time ON feedback (time);
"""
PURGE_EVERY_S = 60.0
PAGE = 1000


class SqliteFeedbackStore:
    """Feedback and impressions in one SQLite file (one gateway process: the embedded mode)."""

    def __init__(self, path: Path, *, retention_s: float) -> None:
        self.path = path
        self.retention_s = retention_s
        self._db: sqlite3.Connection | None = None
        self._lock = threading.RLock()
        self._purged = 0.0

    def _conn(self) -> sqlite3.Connection:
        with self._lock:
            if self._db is None:
                try:
                    self.path.parent.mkdir(parents=True, exist_ok=True)
                    db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
                    db.execute("PRAGMA journal_mode=WAL")
                    db.execute("PRAGMA synchronous=FULL")
                    db.execute("PRAGMA busy_timeout=5000")
                    db.executescript(SCHEMA)
                except (sqlite3.Error, OSError) as exc:
                    raise RampartError(
                        ErrorCode.UNAVAILABLE,
                        f"the feedback store {self.path} cannot be opened ({exc}); check the folder is "
                        "writable (data_dir) or set feedback.backend",
                        stage="feedback",
                    ) from exc
                self._db = db
            return self._db

    def remember(self, impression: Impression) -> None:
        db = self._conn()
        now = time.time()
        with self._failing("record the impression"), immediate_transaction(db, self._lock):
            db.execute(
                "INSERT OR REPLACE INTO impressions VALUES (?, ?, ?, ?, ?)",
                (
                    impression.tenant,
                    impression.user,
                    impression.request_id,
                    impression.to_json(),
                    impression.created + self.retention_s,
                ),
            )
            if now - self._purged >= PURGE_EVERY_S:
                db.execute("DELETE FROM impressions WHERE purge_at < ?", (now,))
                self._purged = now

    def impression(self, tenant: str, user: str, request_id: str) -> Impression | None:
        with self._lock:
            row = (
                self._conn()
                .execute(
                    "SELECT body FROM impressions WHERE tenant = ? AND user = ? AND request_id = ? "
                    "AND purge_at >= ?",
                    (tenant, user, request_id, time.time()),
                )
                .fetchone()
            )
        return Impression.from_json(row[0]) if row is not None else None

    def append(self, events: Sequence[FeedbackEvent]) -> None:
        db = self._conn()
        with self._failing("store the feedback"), immediate_transaction(db, self._lock):
            db.executemany(
                "INSERT INTO feedback (tenant, time, body) VALUES (?, ?, ?)",
                [(e.tenant, e.time, e.to_json()) for e in events],
            )

    def export(
        self, tenant: str | None = None, since: float | None = None, until: float | None = None
    ) -> Iterator[FeedbackEvent]:
        """Pages of :data:`PAGE` rows in (time, id) order, the lock released between pages, so an export
        of a large store neither holds it in memory nor stalls the server's writes."""
        clauses: list[str] = ["time < ?"]
        args: list[float | str] = [until if until is not None else float("inf")]
        if tenant is not None:
            clauses.append("tenant = ?")
            args.append(tenant)
        where = " AND ".join(clauses)
        after: tuple[float, int] = (since if since is not None else float("-inf"), -1)
        while True:
            sql = (
                f"SELECT id, time, body FROM feedback WHERE {where} "  # noqa: S608  # fixed clauses, values bound
                "AND (time > ? OR (time = ? AND id > ?)) ORDER BY time, id LIMIT ?"
            )
            with self._lock:
                rows = self._conn().execute(sql, [*args, after[0], after[0], after[1], PAGE]).fetchall()
            for rowid, _t, body in rows:
                yield FeedbackEvent.from_json(body, str(rowid))
            if len(rows) < PAGE:
                return
            after = (rows[-1][1], rows[-1][0])

    @contextmanager
    def _failing(self, what: str) -> Iterator[None]:
        """A write that SQLite refuses (disk full, read-only file) is 503 naming the file, not a 500."""
        try:
            yield
        except sqlite3.Error as exc:
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"the feedback store {self.path} could not {what} ({exc}); free disk space or check "
                "the file's permissions",
                stage="feedback",
            ) from exc

    def check(self) -> None:
        self._conn()

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
