"""SQLite store: the source of truth for documents, chunks, ACLs, vectors and ingest status.

Both search indexes (tantivy, faiss) are derived from it and can be rebuilt from it without
re-embedding, which is what makes the embedded index safe to reopen after a crash: SQLite's WAL
gives atomic commits, and :meth:`EmbeddedIndex.open` reconciles the derived indexes on start-up.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from services.common.sqlite_tx import immediate_transaction
from services.common.titles import name_key
from services.common.types import Acl, Chunk, DocumentState, DocumentStatus, SearchFilters

SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    tenant TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    version INTEGER NOT NULL,
    state TEXT NOT NULL,
    content_hash TEXT NOT NULL DEFAULT '',
    title TEXT NOT NULL DEFAULT '',
    source TEXT NOT NULL DEFAULT '',
    acl_json TEXT NOT NULL DEFAULT '{}',
    metadata_json TEXT NOT NULL DEFAULT '{}',
    chunks INTEGER NOT NULL DEFAULT 0,
    error TEXT,
    updated_at REAL NOT NULL,
    PRIMARY KEY (tenant, doc_id)
);
CREATE TABLE IF NOT EXISTS chunks (
    cid INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    ordinal INTEGER NOT NULL,
    chunk_json TEXT NOT NULL,
    token_len INTEGER NOT NULL DEFAULT 0,
    vector BLOB NOT NULL,
    claim_vector BLOB,
    UNIQUE (tenant, doc_id, ordinal)
);
CREATE INDEX IF NOT EXISTS chunks_by_doc ON chunks (tenant, doc_id);
CREATE TABLE IF NOT EXISTS acl (
    tenant TEXT NOT NULL,
    token TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    PRIMARY KEY (tenant, token, doc_id)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
-- a document's name (titles.name_key of its title) -> the document: pages found by being named
CREATE TABLE IF NOT EXISTS names (
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    doc_id TEXT NOT NULL,
    PRIMARY KEY (tenant, name, doc_id)
);
CREATE INDEX IF NOT EXISTS names_by_doc ON names (tenant, doc_id);
-- the knowledge graph (docs/graph.md): chunk cid mentions entity (graph.entities.entity_key); an edge
-- between two passages is an entity both mention, so the graph is exactly as readable as its passages
CREATE TABLE IF NOT EXISTS mentions (
    tenant TEXT NOT NULL,
    entity TEXT NOT NULL,
    cid INTEGER NOT NULL,
    PRIMARY KEY (tenant, entity, cid)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS mentions_by_cid ON mentions (cid);
"""
# set once the names table holds every stored document's name as the current ``titles.name_key``
# spells it (v2: HTML character references in titles decoded); a store marked otherwise is rebuilt
NAMES_META = "names_v2"


@dataclass(frozen=True)
class StoredChunk:
    cid: int
    chunk: Chunk
    token_len: int


@dataclass(frozen=True)
class ChunkWrite:
    """A chunk ready to store: its analysed length (for BM25), its embedding (header + text, what
    dense search compares) and its *claim vector* (the text alone, what near-copy detection compares:
    the header makes every chunk of one subject look alike). ``None``: no claim vector (not computed)."""

    chunk: Chunk
    token_len: int
    vector: npt.NDArray[np.float32]
    claim_vector: npt.NDArray[np.float32] | None = None
    # the chunk's entity keys (graph.entities.entity_key spellings): its edges in the knowledge graph
    entities: tuple[str, ...] = ()


@dataclass(frozen=True)
class DocumentWrite:
    tenant: str
    doc_id: str
    version: int
    content_hash: str
    title: str
    source: str
    acl: Acl
    metadata: dict[str, object]
    chunks: Sequence[ChunkWrite]


class DocStore:
    """Thread-safe wrapper over one SQLite file (one connection, serialised by a lock)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        # FULL: a write the ingest journal then marks done must survive a power loss, not only a
        # process crash (NORMAL in WAL mode may roll back the last commits); one fsync per batch.
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(SCHEMA)
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(chunks)")}
        if "claim_vector" not in columns:  # a store written before claim vectors existed
            self._db.execute("ALTER TABLE chunks ADD COLUMN claim_vector BLOB")
        self._lock = threading.RLock()
        if self.get_meta(NAMES_META) is None:  # written before names were kept, or keyed otherwise
            self._backfill_names()

    def _backfill_names(self) -> None:
        with self._tx() as db:
            rows = db.execute("SELECT tenant, doc_id, title FROM documents WHERE chunks > 0").fetchall()
            db.execute("DELETE FROM names")  # keys an older name_key spelled differently
            db.executemany(
                "INSERT OR IGNORE INTO names (tenant, name, doc_id) VALUES (?,?,?)",
                [(t, key, d) for t, d, title in rows if (key := name_key(title)) is not None],
            )
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, '1')", (NAMES_META,))

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        return immediate_transaction(self._db, self._lock)

    # ---- documents -------------------------------------------------------------------------
    def get_status(self, tenant: str, doc_id: str) -> DocumentStatus | None:
        with self._lock:
            row = self._db.execute(
                "SELECT doc_id, tenant, version, state, chunks, error, updated_at, acl_json FROM documents "
                "WHERE tenant=? AND doc_id=?",
                (tenant, doc_id),
            ).fetchone()
        if row is None:
            return None
        return DocumentStatus(
            id=row[0],
            tenant=row[1],
            version=row[2],
            state=DocumentState(row[3]),
            chunks=row[4],
            error=row[5],
            updated_at=row[6],
            readers=_acl_tokens(row[7]),
        )

    def get_version(self, tenant: str, doc_id: str) -> tuple[int, str, DocumentState] | None:
        """``(version, content_hash, state)`` of the stored document, if any."""
        with self._lock:
            row = self._db.execute(
                "SELECT version, content_hash, state FROM documents WHERE tenant=? AND doc_id=?",
                (tenant, doc_id),
            ).fetchone()
        return None if row is None else (int(row[0]), str(row[1]), DocumentState(row[2]))

    def mark(
        self,
        tenant: str,
        doc_id: str,
        version: int,
        state: DocumentState,
        *,
        error: str | None = None,
        content_hash: str = "",
    ) -> None:
        """Record a state without touching chunks (pending on accept, failed with a reason)."""
        with self._tx() as db:
            db.execute(
                "INSERT INTO documents (tenant, doc_id, version, state, error, content_hash, updated_at) "
                "VALUES (?,?,?,?,?,?,?) ON CONFLICT (tenant, doc_id) DO UPDATE SET "
                "version=excluded.version, state=excluded.state, error=excluded.error, "
                "content_hash=CASE WHEN excluded.content_hash='' THEN documents.content_hash "
                "ELSE excluded.content_hash END, updated_at=excluded.updated_at",
                (tenant, doc_id, version, state.value, error, content_hash, time.time()),
            )

    def mark_many(self, keys: Sequence[tuple[str, str]], state: DocumentState) -> None:
        with self._tx() as db:
            db.executemany(
                "UPDATE documents SET state=?, error=NULL, updated_at=? WHERE tenant=? AND doc_id=?",
                [(state.value, time.time(), t, d) for t, d in keys],
            )

    def write_documents(self, docs: Sequence[DocumentWrite]) -> tuple[list[int], list[int]]:
        """Replace the chunks/ACL of each document in one transaction; state becomes ``pending``.

        Returns ``(removed_cids, added_cids)`` so the derived indexes can apply the same change.
        """
        removed: list[int] = []
        added: list[int] = []
        now = time.time()
        with self._tx() as db:
            for d in docs:
                old = [
                    r[0]
                    for r in db.execute(
                        "SELECT cid FROM chunks WHERE tenant=? AND doc_id=?", (d.tenant, d.doc_id)
                    )
                ]
                removed += old
                db.executemany("DELETE FROM mentions WHERE cid=?", [(c,) for c in old])
                db.execute("DELETE FROM chunks WHERE tenant=? AND doc_id=?", (d.tenant, d.doc_id))
                db.execute("DELETE FROM acl WHERE tenant=? AND doc_id=?", (d.tenant, d.doc_id))
                db.execute("DELETE FROM names WHERE tenant=? AND doc_id=?", (d.tenant, d.doc_id))
                key = name_key(d.title)
                if key is not None and d.chunks:
                    db.execute(
                        "INSERT INTO names (tenant, name, doc_id) VALUES (?,?,?)", (d.tenant, key, d.doc_id)
                    )
                db.executemany(
                    "INSERT INTO acl (tenant, token, doc_id) VALUES (?,?,?)",
                    [(d.tenant, tok, d.doc_id) for tok in d.acl.tokens()],
                )
                for cw in d.chunks:
                    cur = db.execute(
                        "INSERT INTO chunks (tenant, doc_id, ordinal, chunk_json, token_len, vector, "
                        "claim_vector) VALUES (?,?,?,?,?,?,?)",
                        (
                            d.tenant,
                            d.doc_id,
                            cw.chunk.ordinal,
                            cw.chunk.model_dump_json(),
                            cw.token_len,
                            np.ascontiguousarray(cw.vector, dtype=np.float32).tobytes(),
                            None
                            if cw.claim_vector is None
                            else np.ascontiguousarray(cw.claim_vector, dtype=np.float32).tobytes(),
                        ),
                    )
                    assert cur.lastrowid is not None
                    added.append(cur.lastrowid)
                    db.executemany(
                        "INSERT OR IGNORE INTO mentions (tenant, entity, cid) VALUES (?,?,?)",
                        [(d.tenant, key, cur.lastrowid) for key in cw.entities],
                    )
                db.execute(
                    "INSERT INTO documents (tenant, doc_id, version, state, content_hash, title, source, "
                    "acl_json, metadata_json, chunks, error, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,NULL,?) "
                    "ON CONFLICT (tenant, doc_id) DO UPDATE SET version=excluded.version, "
                    "state=excluded.state, content_hash=excluded.content_hash, title=excluded.title, "
                    "source=excluded.source, acl_json=excluded.acl_json, "
                    "metadata_json=excluded.metadata_json, chunks=excluded.chunks, error=NULL, "
                    "updated_at=excluded.updated_at",
                    (
                        d.tenant,
                        d.doc_id,
                        d.version,
                        DocumentState.PENDING.value,
                        d.content_hash,
                        d.title,
                        d.source,
                        d.acl.model_dump_json(),
                        json.dumps(d.metadata),
                        len(d.chunks),
                        now,
                    ),
                )
        return removed, added

    def delete_document(self, tenant: str, doc_id: str) -> list[int]:
        """Drop chunks and ACL, keep a ``deleted`` status row; returns the removed chunk ids."""
        with self._tx() as db:
            removed = [
                r[0]
                for r in db.execute("SELECT cid FROM chunks WHERE tenant=? AND doc_id=?", (tenant, doc_id))
            ]
            db.executemany("DELETE FROM mentions WHERE cid=?", [(c,) for c in removed])
            db.execute("DELETE FROM chunks WHERE tenant=? AND doc_id=?", (tenant, doc_id))
            db.execute("DELETE FROM acl WHERE tenant=? AND doc_id=?", (tenant, doc_id))
            db.execute("DELETE FROM names WHERE tenant=? AND doc_id=?", (tenant, doc_id))
            db.execute(
                "UPDATE documents SET state=?, chunks=0, error=NULL, updated_at=? WHERE tenant=? AND doc_id=?",
                (DocumentState.DELETED.value, time.time(), tenant, doc_id),
            )
        return removed

    def pending_documents(self) -> list[tuple[str, str]]:
        with self._lock:
            return [
                (r[0], r[1])
                for r in self._db.execute(
                    "SELECT tenant, doc_id FROM documents WHERE state=?", (DocumentState.PENDING.value,)
                )
            ]

    # ---- chunks ------------------------------------------------------------------------------
    def allowed_cids(
        self, tenant: str, acl_tokens: Sequence[str], filters: SearchFilters | None = None
    ) -> npt.NDArray[np.int64]:
        """Chunk ids this tenant + ACL token set (and optional filters) may read.

        This is the dense search's inside filter, and the BM25 search's when filters are given.
        """
        marks = ",".join("?" * len(acl_tokens))
        sql = (
            "SELECT DISTINCT c.cid FROM acl a JOIN chunks c ON c.tenant=a.tenant AND c.doc_id=a.doc_id "
            f"JOIN documents d ON d.tenant=c.tenant AND d.doc_id=c.doc_id WHERE a.tenant=? AND a.token IN ({marks})"
        )
        where, extra = _filter_sql(filters)
        with self._lock:
            rows = self._db.execute(sql + where, [tenant, *acl_tokens, *extra]).fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def entity_postings(
        self,
        tenant: str,
        acl_tokens: Sequence[str],
        keys: Sequence[str],
        limit: int,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[int]]:
        """Per entity key: the chunk ids of indexed documents this tenant + ACL token set (and
        filters) may read that mention it, ascending, at most ``limit`` (the graph's reads)."""
        if not keys or not acl_tokens:
            return {}
        where, extra = _filter_sql(filters)
        tokens = ",".join("?" * len(acl_tokens))
        out: dict[str, list[int]] = {}
        with self._lock:
            for start in range(0, len(keys), 400):
                part = list(keys[start : start + 400])
                sql = (
                    "SELECT entity, cid FROM (SELECT m.entity, m.cid, ROW_NUMBER() OVER (PARTITION BY "
                    "m.entity ORDER BY m.cid) AS rn FROM mentions m JOIN chunks c ON c.cid=m.cid JOIN "
                    "documents d ON d.tenant=c.tenant AND d.doc_id=c.doc_id WHERE m.tenant=? AND "
                    f"m.entity IN ({','.join('?' * len(part))}) AND d.state=? AND EXISTS (SELECT 1 FROM "
                    f"acl a WHERE a.tenant=c.tenant AND a.doc_id=c.doc_id AND a.token IN ({tokens})){where}"
                    ") WHERE rn <= ? ORDER BY entity, cid"
                )
                args = [tenant, *part, DocumentState.INDEXED.value, *acl_tokens, *extra, limit]
                for entity, cid in self._db.execute(sql, args):
                    out.setdefault(entity, []).append(int(cid))
        return out

    def chunk_entities(self, cids: Sequence[int]) -> dict[int, list[str]]:
        """Each chunk's entity keys (no ACL here: callers pass only ids they may read)."""
        out: dict[int, list[str]] = {}
        with self._lock:
            for start in range(0, len(cids), 500):
                part = list(cids[start : start + 500])
                rows = self._db.execute(
                    f"SELECT cid, entity FROM mentions WHERE cid IN ({','.join('?' * len(part))})", part
                )
                for cid, entity in rows:
                    out.setdefault(int(cid), []).append(entity)
        return out

    def named_chunks(self, tenant: str, keys: Sequence[str]) -> list[tuple[str, str, int]]:
        """``(name, doc_id, cid of its first chunk)`` of the tenant's documents named by any of
        ``keys`` (``titles.name_key`` spellings) that are indexed (a pending one is not searchable yet);
        no ACL here: the caller filters by what it may read."""
        rows: list[tuple[str, str, int]] = []
        with self._lock:
            for start in range(0, len(keys), 500):
                part = list(keys[start : start + 500])
                marks = ",".join("?" * len(part))
                rows += self._db.execute(
                    "SELECT n.name, n.doc_id, (SELECT c.cid FROM chunks c WHERE c.tenant=n.tenant AND "
                    "c.doc_id=n.doc_id ORDER BY c.ordinal LIMIT 1) FROM names n JOIN documents d ON "
                    f"d.tenant=n.tenant AND d.doc_id=n.doc_id WHERE n.tenant=? AND n.name IN ({marks}) "
                    "AND d.state=?",
                    [tenant, *part, DocumentState.INDEXED.value],
                ).fetchall()
        return [(name, doc, int(cid)) for name, doc, cid in rows if cid is not None]

    def _by_cid(self, columns: str, cids: Sequence[int], where: str = "") -> list[tuple[Any, ...]]:
        """``SELECT cid, <columns>`` for the given chunk ids (in batches under SQLite's variable limit)."""
        rows: list[tuple[Any, ...]] = []
        with self._lock:
            for start in range(0, len(cids), 500):
                part = list(cids[start : start + 500])
                marks = ",".join("?" * len(part))
                rows += self._db.execute(
                    f"SELECT cid, {columns} FROM chunks WHERE cid IN ({marks}){where}", part
                ).fetchall()
        return rows

    def get_chunks(self, cids: Sequence[int]) -> dict[int, StoredChunk]:
        return {
            cid: StoredChunk(cid, Chunk.model_validate_json(cj), tl)
            for cid, cj, tl in self._by_cid("chunk_json, token_len", cids)
        }

    def get_vectors(self, cids: Sequence[int], dim: int) -> dict[int, npt.NDArray[np.float32]]:
        return {cid: np.frombuffer(b, dtype=np.float32, count=dim) for cid, b in self._by_cid("vector", cids)}

    def get_claim_vectors(self, cids: Sequence[int], dim: int) -> dict[int, npt.NDArray[np.float32]]:
        """Claim vectors of the chunks that have one (see :class:`ChunkWrite`)."""
        rows = self._by_cid("claim_vector", cids, " AND claim_vector IS NOT NULL")
        return {cid: np.frombuffer(b, dtype=np.float32, count=dim) for cid, b in rows}

    def iter_claim_vectors(self, batch: int = 1000) -> Iterator[list[tuple[int, bytes]]]:
        """``(cid, claim vector bytes)`` of every live chunk that has one, in id order (rebuilds)."""
        last = -1
        while True:
            with self._lock:
                rows = self._db.execute(
                    "SELECT cid, claim_vector FROM chunks WHERE cid > ? AND claim_vector IS NOT NULL "
                    "ORDER BY cid LIMIT ?",
                    (last, batch),
                ).fetchall()
            if not rows:
                return
            yield [(int(r[0]), bytes(r[1])) for r in rows]
            last = rows[-1][0]

    def claim_cids(self) -> set[int]:
        with self._lock:
            return {r[0] for r in self._db.execute("SELECT cid FROM chunks WHERE claim_vector IS NOT NULL")}

    def doc_ids(self, cids: Sequence[int]) -> dict[int, str]:
        """The document of each chunk (absent: no such chunk)."""
        return {cid: doc_id for cid, doc_id in self._by_cid("doc_id", cids)}

    def iter_all_chunks(self, batch: int = 1000) -> Iterator[list[tuple[int, Chunk, int, bytes, str]]]:
        """All live chunks in id order, with ACL tokens (``\\x1f``-joined), for index rebuilds."""
        last = -1
        while True:
            with self._lock:
                rows = self._db.execute(
                    "SELECT c.cid, c.chunk_json, c.token_len, c.vector, "
                    "(SELECT group_concat(token, char(31)) FROM acl a WHERE a.tenant=c.tenant "
                    "AND a.doc_id=c.doc_id) FROM chunks c WHERE c.cid > ? ORDER BY c.cid LIMIT ?",
                    (last, batch),
                ).fetchall()
            if not rows:
                return
            yield [(r[0], Chunk.model_validate_json(r[1]), r[2], r[3], r[4] or "") for r in rows]
            last = rows[-1][0]

    def chunk_version(self, tenant: str, doc_id: str) -> int | None:
        """Version of the document the stored chunks came from (``None``: no chunks)."""
        with self._lock:
            row = self._db.execute(
                "SELECT chunk_json FROM chunks WHERE tenant=? AND doc_id=? LIMIT 1", (tenant, doc_id)
            ).fetchone()
        return None if row is None else Chunk.model_validate_json(row[0]).version

    def all_cids(self) -> npt.NDArray[np.int64]:
        with self._lock:
            rows = self._db.execute("SELECT cid FROM chunks ORDER BY cid").fetchall()
        return np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))

    def length_stats(self, tenant: str | None = None) -> tuple[int, int]:
        """``(chunk count, total analysed tokens)`` for BM25's average length: the index's, or one
        tenant's (per-tenant statistics)."""
        where, args = ("WHERE tenant=?", (tenant,)) if tenant is not None else ("", ())
        with self._lock:
            n, total = self._db.execute(
                f"SELECT count(*), coalesce(sum(token_len), 0) FROM chunks {where}",
                args,
            ).fetchone()
        return int(n), int(total)

    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        with self._tx() as db:
            db.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value=excluded.value",
                (key, value),
            )

    def counts_by_state(self) -> dict[str, int]:
        with self._lock:
            return {s: n for s, n in self._db.execute("SELECT state, count(*) FROM documents GROUP BY state")}


def _filter_sql(filters: SearchFilters | None) -> tuple[str, list[object]]:
    """``(" AND ...", args)`` restricting chunk ``c`` of document ``d`` to ``filters`` (none: no-op)."""
    sql = ""
    args: list[object] = []
    if filters is not None:
        if filters.doc_ids:
            sql += f" AND c.doc_id IN ({','.join('?' * len(filters.doc_ids))})"
            args += filters.doc_ids
        if filters.sources:
            sql += f" AND d.source IN ({','.join('?' * len(filters.sources))})"
            args += filters.sources
        for key, value in filters.metadata.items():
            sql += " AND json_extract(d.metadata_json, ?) = ?"
            args += [f'$."{key}"', value]
    return sql, args


def _acl_tokens(acl_json: str) -> list[str]:
    """The stored ACL as index tokens; ``{}`` (a document only ever marked, never written): none."""
    data = json.loads(acl_json or "{}")
    return Acl.model_validate(data).tokens() if data else []
