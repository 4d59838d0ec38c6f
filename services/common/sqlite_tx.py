"""One write transaction over a shared SQLite connection (the index's doc store, the ingest journal).

Both keep one connection in autocommit mode (``isolation_level=None``) guarded by a lock: ``BEGIN
IMMEDIATE`` takes the write lock up front, so a transaction never fails half-way on a lock upgrade,
and any exception rolls the whole of it back."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def immediate_transaction(
    db: sqlite3.Connection, lock: threading.Lock | threading.RLock
) -> Iterator[sqlite3.Connection]:
    """``db`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` under ``lock``; ``ROLLBACK`` on any exception."""
    with lock:
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
