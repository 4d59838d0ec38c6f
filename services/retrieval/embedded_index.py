"""The embedded index: SQLite (truth) + tantivy (BM25) + faiss (vectors) in one folder.

Write order for a batch: SQLite transaction (chunks, vectors, ACL; documents ``pending``) → tantivy
commit → faiss save (atomic rename) → documents ``indexed``. :meth:`EmbeddedIndex.open` reconciles
after a crash at any point: a derived index whose chunk ids differ from SQLite's is rebuilt from SQLite
(no re-embedding), then ``pending`` documents are settled (indexed, or failed with a reason).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path

import filelock
import numpy as np
import numpy.typing as npt

from services.common.errors import ErrorCode, RampartError
from services.common.titles import mentioned_names
from services.common.types import Chunk, DocumentState, DocumentStatus, Principal, SearchFilters
from services.retrieval.bm25_index import TANTIVY_B, TANTIVY_K1, Bm25Doc, TantivyBm25Index, bm25_scores
from services.retrieval.capabilities import (
    COPY_SEARCH_EXTRA,
    COPY_SEARCH_FACTOR,
    CheckReads,
    Copies,
    closest_per_document,
    copy_profiles,
)
from services.retrieval.config import IndexSettings
from services.retrieval.doc_store import DocStore, DocumentWrite
from services.retrieval.graph.reads import GraphReads, check_postings
from services.retrieval.index import Hits
from services.retrieval.links.reads import MAX_NAMED_KEYS, LinkReads
from services.retrieval.vector_index import FaissVectorIndex

log = logging.getLogger(__name__)

RESCORE_DEPTH = 4  # candidates per wanted hit when rescored (other k1/b, or per-tenant statistics)
RESCORE_MIN = 200


class EmbeddedIndex(CheckReads, LinkReads, GraphReads):
    """A ``SearchIndex`` on local disk that also serves the fact-check's and linking's reads (see the
    module doc for its storage and recovery)."""

    def __init__(self, root: Path, dim: int, settings: IndexSettings, lock: filelock.BaseFileLock) -> None:
        self.root = root
        self.dim = dim
        self._settings = settings
        self._lock_file = lock
        self.store = DocStore(root / "store.sqlite3")
        self.bm25_index = TantivyBm25Index(root / "bm25", heap_mb=settings.writer_heap_mb)
        self.vectors = FaissVectorIndex(
            root / "vectors.faiss",
            dim,
            kind=settings.vector_kind,
            hnsw_m=settings.hnsw_m,
            ef_search=settings.hnsw_ef_search,
        )
        # claim vectors (chunk text without its header), searched only for near-copies of a result
        self.claims = FaissVectorIndex(
            root / "claims.faiss",
            dim,
            kind=settings.vector_kind,
            hnsw_m=settings.hnsw_m,
            ef_search=settings.hnsw_ef_search,
        )
        self._write_lock = threading.Lock()
        self._generation = 0
        self._allowed_cache: dict[tuple[str, tuple[str, ...]], tuple[int, npt.NDArray[np.int64]]] = {}
        # a tenant's (chunk count, total analysed length) per generation: a SQL sum over its chunks
        # is tens of ms at 100k chunks, and every BM25 search of a shared index needs it
        self._lengths_cache: dict[str, tuple[int, tuple[int, int]]] = {}

    @classmethod
    def open(
        cls, root: Path, *, dim: int, settings: IndexSettings | None = None, model_id: str | None = None
    ) -> EmbeddedIndex:
        """Open (or create) the index at ``root``, reconciling after an unclean stop.

        ``model_id`` is the embedder's: an index built with another model is refused, since its
        stored vectors would be silently meaningless to the new one.
        """
        root.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(root / ".lock"), timeout=0)
        try:
            lock.acquire()
        except filelock.Timeout as exc:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"the index at {root} is in use by another rampart process; stop it, or point "
                "RAMPART_DATA_DIR at another folder",
                path=str(root),
            ) from exc
        try:
            if model_id is not None:
                _check_model(root, model_id)
            index = cls(root, dim, settings or IndexSettings(), lock)
            index.reconcile()
        except BaseException:
            lock.release()
            raise
        return index

    def close(self) -> None:
        with self._write_lock:
            self.bm25_index.close()
            self.store.close()
            self._lock_file.release()

    # ---- recovery ----------------------------------------------------------------------------------
    def reconcile(self) -> dict[str, int]:
        """Make the derived indexes match SQLite and settle ``pending`` documents."""
        with self._write_lock:
            truth = set(self.store.all_cids().tolist())
            fixed = {"bm25_rebuilt": 0, "vectors_rebuilt": 0}
            if self.bm25_index.all_cids() != truth:
                log.warning("bm25 index differs from the store; rebuilding", extra={"chunks": len(truth)})
                self._rebuild_bm25()
                fixed["bm25_rebuilt"] = 1
            if _stale(self.vectors, truth):
                log.warning("vector index differs from the store; rebuilding", extra={"chunks": len(truth)})
                self._rebuild_vectors()
                fixed["vectors_rebuilt"] = 1
            if _stale(self.claims, self.store.claim_cids()):
                log.warning("claim-vector index differs from the store; rebuilding")
                self._rebuild_claims()
                fixed["claims_rebuilt"] = 1
            fixed["settled"] = self._settle_pending()
            self._generation += 1
            return fixed

    def _rebuild_bm25(self) -> None:
        self.bm25_index = TantivyBm25Index.recreate(self.root / "bm25", heap_mb=self._settings.writer_heap_mb)
        for rows in self.store.iter_all_chunks():
            self.bm25_index.add(
                Bm25Doc(cid, c.tenant, c.doc_id, acl.split("\x1f") if acl else [], c.indexed_text)
                for cid, c, _, _, acl in rows
            )
        self.bm25_index.commit()

    def _rebuild_vectors(self) -> None:
        self.vectors.reset()
        for rows in self.store.iter_all_chunks():
            cids = [r[0] for r in rows]
            mat = np.stack([np.frombuffer(r[3], dtype=np.float32, count=self.dim) for r in rows])
            self.vectors.add(cids, mat)
        self.vectors.save()

    def _rebuild_claims(self) -> None:
        self.claims.reset()
        for rows in self.store.iter_claim_vectors():
            mat = np.stack([np.frombuffer(blob, dtype=np.float32, count=self.dim) for _, blob in rows])
            self.claims.add([cid for cid, _ in rows], mat)
        self.claims.save()

    def _settle_pending(self) -> int:
        pending = self.store.pending_documents()
        if not pending:
            return 0
        for tenant, doc_id in pending:
            current = self.store.get_version(tenant, doc_id)
            stored = self.store.chunk_version(tenant, doc_id)
            if current is None:
                continue
            if stored is None:
                self.store.mark(
                    tenant,
                    doc_id,
                    current[0],
                    DocumentState.FAILED,
                    error="ingest was interrupted before the document was indexed; send it again",
                )
            elif stored == current[0]:
                self.store.mark_many([(tenant, doc_id)], DocumentState.INDEXED)
            else:
                self.store.mark(
                    tenant,
                    doc_id,
                    current[0],
                    DocumentState.FAILED,
                    error=f"ingest of version {current[0]} was interrupted; version {stored} is still "
                    "searchable; send the new version again",
                )
        return len(pending)

    # ---- writes ---------------------------------------------------------------------------------------
    def write(self, docs: Sequence[DocumentWrite]) -> None:
        if not docs:
            return
        with self._write_lock:
            removed, added = self.store.write_documents(docs)
            for d in docs:
                self.bm25_index.delete_document(d.tenant, d.doc_id)
            acl_of = {(d.tenant, d.doc_id): d.acl.tokens() for d in docs}
            flat = [(d, cw) for d in docs for cw in d.chunks]
            self.bm25_index.add(
                Bm25Doc(cid, d.tenant, d.doc_id, acl_of[(d.tenant, d.doc_id)], cw.chunk.indexed_text)
                for cid, (d, cw) in zip(added, flat, strict=True)
            )
            self.bm25_index.commit()
            self.vectors.remove(removed)
            self.claims.remove(removed)
            if flat:
                self.vectors.add(added, np.stack([cw.vector for _, cw in flat]).astype(np.float32))
                claimed = [
                    (cid, cw.claim_vector)
                    for cid, (_, cw) in zip(added, flat, strict=True)
                    if cw.claim_vector is not None
                ]
                if claimed:
                    self.claims.add(
                        [c for c, _ in claimed], np.stack([v for _, v in claimed]).astype(np.float32)
                    )
            self.vectors.save()
            self.claims.save()
            self.store.mark_many([(d.tenant, d.doc_id) for d in docs], DocumentState.INDEXED)
            self._generation += 1

    def delete(self, tenant: str, doc_id: str) -> bool:
        with self._write_lock:
            current = self.store.get_version(tenant, doc_id)
            if current is None or current[2] is DocumentState.DELETED:
                return False
            removed = self.store.delete_document(tenant, doc_id)
            self.bm25_index.delete_document(tenant, doc_id)
            self.bm25_index.commit()
            self.vectors.remove(removed)
            self.vectors.save()
            self.claims.remove(removed)
            self.claims.save()
            self._generation += 1
            return True

    def mark(
        self, tenant: str, doc_id: str, version: int, state: DocumentState, *, error: str | None = None
    ) -> None:
        self.store.mark(tenant, doc_id, version, state, error=error)

    def status(self, tenant: str, doc_id: str) -> DocumentStatus | None:
        return self.store.get_status(tenant, doc_id)

    def current(self, tenant: str, doc_id: str) -> tuple[int, str, DocumentState] | None:
        return self.store.get_version(tenant, doc_id)

    def token_length(self, text: str) -> int:
        return len(self.bm25_index.analyze(text))

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        return [len(self.bm25_index.analyze(t)) for t in texts]

    # ---- reads ----------------------------------------------------------------------------------------
    def _allowed(self, principal: Principal, filters: SearchFilters | None) -> npt.NDArray[np.int64]:
        tokens = principal.acl_tokens()
        if filters is not None and not filters.is_empty():
            return self.store.allowed_cids(principal.tenant, tokens, filters)
        key = (principal.tenant, tuple(tokens))
        cached = self._allowed_cache.get(key)
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        generation = self._generation
        allowed = self.store.allowed_cids(principal.tenant, tokens)
        if len(self._allowed_cache) > 1024:
            self._allowed_cache.clear()
        self._allowed_cache[key] = (generation, allowed)
        return allowed

    def bm25(
        self,
        query: str,
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
        restrict: Sequence[int] | None = None,
    ) -> Hits:
        if filters is not None and not filters.is_empty():
            allowed = set(self._allowed(principal, filters).tolist())
            restrict = [c for c in restrict if c in allowed] if restrict is not None else sorted(allowed)
            if not restrict:
                return []
        k1, b = self._settings.bm25_k1, self._settings.bm25_b
        # BM25 per tenant: IDF and average length from the caller's tenant alone. Tantivy's own
        # scores use the whole index's statistics, so a second tenant's documents would move them
        # (a rare word another tenant wrote lowers its IDF: detectable, issue 36 point 5). With one
        # tenant in the index the two are the same and tantivy's scores stand.
        own = self._tenant_lengths(principal.tenant)
        shared = own[0] != self.bm25_index.num_docs()
        native = abs(k1 - TANTIVY_K1) < 1e-9 and abs(b - TANTIVY_B) < 1e-9 and not shared
        depth = limit if native or restrict is not None else max(limit * RESCORE_DEPTH, RESCORE_MIN)
        hits = self.bm25_index.search(
            query,
            tenant=principal.tenant,
            acl_tokens=principal.acl_tokens(),
            limit=depth,
            restrict_cids=restrict,
        )
        if native or not hits:
            return hits[:limit]
        return self._rescore(query, hits, k1, b, principal.tenant, own)[:limit]

    def _tenant_lengths(self, tenant: str) -> tuple[int, int]:
        """``(chunk count, total analysed length)`` of ``tenant``, cached until the next write."""
        cached = self._lengths_cache.get(tenant)
        if cached is not None and cached[0] == self._generation:
            return cached[1]
        generation = self._generation
        lengths = self.store.length_stats(tenant)
        if len(self._lengths_cache) > 1024:
            self._lengths_cache.clear()
        self._lengths_cache[tenant] = (generation, lengths)
        return lengths

    def _rescore(
        self, query: str, hits: Hits, k1: float, b: float, tenant: str, lengths: tuple[int, int]
    ) -> Hits:
        """``hits`` scored again with ``k1``/``b`` and ``tenant``'s own statistics (``lengths``:
        its chunk count and total analysed length)."""
        terms = self.bm25_index.analyze(query)
        stored = self.store.get_chunks([c for c, _ in hits])
        n_chunks, total = lengths
        docs = [
            (cid, self.bm25_index.analyze(stored[cid].chunk.indexed_text), stored[cid].token_len)
            for cid, _ in hits
            if cid in stored
        ]
        scores = bm25_scores(
            terms,
            docs,
            doc_freqs=self.bm25_index.doc_freqs(set(terms), tenant),
            num_docs=n_chunks,
            avg_len=total / max(n_chunks, 1),
            k1=k1,
            b=b,
        )
        return sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))

    def dense(
        self,
        vector: npt.NDArray[np.float32],
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
    ) -> Hits:
        return self.vectors.search(vector, self._allowed(principal, filters), limit)

    def named(
        self,
        texts: Sequence[str],
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
    ) -> Hits:
        if limit <= 0:
            return []
        # bounded whatever the caller sends: a long text's first mentions are the ones looked up
        keys = list(dict.fromkeys(k for t in texts for k in mentioned_names(t, MAX_NAMED_KEYS)))[
            :MAX_NAMED_KEYS
        ]
        rows = self.store.named_chunks(principal.tenant, keys)
        if not rows:
            return []
        cids = np.fromiter((cid for _, _, cid in rows), dtype=np.int64, count=len(rows))
        readable = np.isin(cids, self._allowed(principal, filters))
        rank = {k: i for i, k in enumerate(keys)}
        found = sorted(
            (
                (rank[name], doc, cid)
                for (name, doc, cid), ok in zip(rows, readable.tolist(), strict=True)
                if ok
            ),
        )
        out: Hits = []
        seen: set[str] = set()
        for _, doc, cid in found:
            if doc not in seen:
                seen.add(doc)
                out.append((cid, 1.0))
        return out[:limit]

    def cosine(
        self, vector: npt.NDArray[np.float32], cids: Sequence[int], principal: Principal | None = None
    ) -> dict[int, float]:
        vecs = self.store.get_vectors(cids, self.dim)
        return {cid: float(np.dot(v, vector)) for cid, v in vecs.items()}

    def stored_vectors(
        self, cids: Sequence[int], principal: Principal | None = None
    ) -> dict[int, npt.NDArray[np.float32]]:
        return self.store.get_vectors(cids, self.dim)

    def copy_cosines(
        self,
        cids: Sequence[int],
        principal: Principal,
        limit: int,
        *,
        expand: float = 0.0,
    ) -> dict[int, Copies]:
        return copy_profiles(
            cids, limit, expand=expand, closest=lambda some, n: self._closest(some, principal, n)
        )

    def _closest(
        self, cids: list[int], principal: Principal, limit: int
    ) -> dict[int, list[tuple[int, float]]]:
        """Per chunk with a claim vector: (chunk, cosine) of the closest chunk of each other readable
        document, highest first, at most ``limit``."""
        mine = self.store.get_claim_vectors(cids, self.dim)
        if not mine:
            return {}
        order = [c for c in cids if c in mine]
        # a document may have many close chunks of its own: look deep enough to still see ``limit``
        # other documents after dropping them and the duplicates of one document
        depth = limit * COPY_SEARCH_FACTOR + COPY_SEARCH_EXTRA
        found = self.claims.search_many(
            np.stack([mine[c] for c in order]), self._allowed(principal, None), depth
        )
        doc_of = self.store.doc_ids(list({n for hits in found for n, _ in hits} | set(order)))
        return closest_per_document(order, found, doc_of, limit)

    def chunks(self, cids: Sequence[int], principal: Principal | None = None) -> dict[int, Chunk]:
        return {cid: sc.chunk for cid, sc in self.store.get_chunks(cids).items()}

    # ---- the knowledge graph's reads (GraphReads) ----------------------------------------------------
    def entity_postings(
        self,
        keys: Sequence[str],
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[int]]:
        check_postings(keys, limit)
        return self.store.entity_postings(principal.tenant, principal.acl_tokens(), keys, limit, filters)

    def chunk_entities(self, cids: Sequence[int]) -> dict[int, list[str]]:
        return self.store.chunk_entities(cids)

    def stats(self) -> dict[str, int]:
        n_chunks, _ = self.store.length_stats()
        return {"chunks": n_chunks, **{f"documents_{k}": v for k, v in self.store.counts_by_state().items()}}


def _stale(index: FaissVectorIndex, truth: set[int]) -> bool:
    """Whether a faiss index misses the store's ids (flat: or holds others; hnsw keeps deleted ids
    until a rebuild, the selector hides them)."""
    ids = index.ids()
    return ids != truth if index.kind == "flat" else not truth <= ids


def _check_model(root: Path, model_id: str) -> None:
    """Record the embedder on first open; refuse another one later (before opening anything else)."""
    store = DocStore(root / "store.sqlite3")
    try:
        built_with = store.get_meta("embedder")
        if built_with is None:
            store.set_meta("embedder", model_id)
        elif built_with != model_id:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"the index at {root} was built with embedder {built_with}, but the configured one is "
                f"{model_id}; re-ingest into a fresh RAMPART_DATA_DIR (or configure the original model)",
                built_with=built_with,
                configured=model_id,
            )
    finally:
        store.close()
