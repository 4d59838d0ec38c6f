"""The OpenSearch index: the ``SearchIndex`` of ``index.backend=opensearch`` (docs/opensearch.md).

Unlike the embedded index, any number of processes share it: the retrieval-service replicas and the
ingest workers all talk to one OpenSearch. Three indexes, each a versioned index behind an alias
(``<prefix>-chunks`` → ``<prefix>-chunks-v2``; a new layout is a new version that ``rampart index
migrate`` builds and swaps the alias to: :mod:`services.retrieval.opensearch_migrate`):

- **chunks**: one document per chunk, ``_id`` = its chunk id. BM25 text (k1/b from ``index.bm25_*``),
  the 384-d HNSW vector and the claim vector (Lucene engine here), and keyword fields that every read
  filters on *inside* the search: tenant, ACL tokens, document id and version, source, trust.
- **documents**: one per (tenant, document): ingest status, version, content hash, the name it is found
  by (``named``), and the ids of its chunks (so an update or a delete removes exactly those).
- **meta**: the chunk-id counter (the ``SearchIndex`` speaks integer chunk ids, as the embedded index's
  SQLite assigns them).

Write order of a batch: documents marked ``pending`` with the ids their new chunks will get → new
chunks (bulk) → the new versions' entries → old chunks deleted → updated documents ``indexed``; each
step leaves what a repair needs after a crash (:mod:`services.retrieval.opensearch_repair`: on open,
and at this index's next write). Each bulk item that fails fails its document (with OpenSearch's
reason) and the others still land. Refresh policy: ``opensearch.refresh`` on the chunk bulk and the
last step; the default ``wait_for`` returns once the write is searchable, which is what ingest
acknowledges, at the cost of up to two refresh intervals (1 s each by default) per write of new
documents, three when old chunks are replaced.
Status reads (``status``, ``current``, chunk and vector reads) are real-time GETs, never stale.

The mappings live in :mod:`services.retrieval.opensearch_layout`; the retry and error policy of the
requests in :mod:`services.retrieval.opensearch_transport` (the id counter is the one request sent
only once).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from services.common.errors import ErrorCode, RampartError
from services.common.titles import mentioned_names
from services.common.types import Chunk, DocumentState, DocumentStatus, Principal, SearchFilters
from services.retrieval.capabilities import (
    COPY_SEARCH_EXTRA,
    COPY_SEARCH_FACTOR,
    CheckReads,
    Copies,
    closest_per_document,
    copy_profiles,
)
from services.retrieval.config import IndexSettings, OpenSearchSettings
from services.retrieval.doc_store import DocumentWrite
from services.retrieval.index import Hits
from services.retrieval.links.reads import MAX_NAMED_KEYS, LinkReads
from services.retrieval.opensearch_layout import (
    ANALYZER,
    SCHEMA_VERSION,
    chunk_source,
    chunks_body,
    doc_key,
    documents_body,
    floats,
    indexed_source,
    meta_body,
)
from services.retrieval.opensearch_repair import (
    CLEARED,
    ENTRY_FIELDS,
    new_writer,
    plan,
    retire,
    unfinished,
    writer_gone,
)
from services.retrieval.opensearch_transport import (
    BULK_ACTIONS,
    Transport,
    alias_target,
    complete,
    connect,
    item_reason,
)

log = logging.getLogger(__name__)

MIGRATE_HINT = "`rampart index migrate` (with the same RAMPART_OPENSEARCH__* settings)"


# tokens per _analyze request, under the node's index.analyze.max_token_count (10,000 by default)
ANALYZE_TOKENS = 8000
_WORDS = re.compile(r"[^\W_]+")  # at least the analyser's tokens (it splits on non-letters/digits)


def analyze_groups(texts: Sequence[str], limit: int) -> list[list[str]]:
    """``texts`` in order, grouped so that each group's token count (bounded above by its runs of
    letters and digits, before stop words and long tokens are dropped) stays within ``limit``; a text
    over the limit goes alone."""
    groups: list[list[str]] = []
    size = limit + 1
    for t in texts:
        n = len(_WORDS.findall(t))
        if size + n > limit:
            groups.append([])
            size = 0
        groups[-1].append(t)
        size += n
    return groups


class OpenSearchIndex(CheckReads, LinkReads):
    """A ``SearchIndex`` on an OpenSearch cluster (see the module doc for its layout and writes)."""

    def __init__(
        self, transport: Transport, dim: int, settings: OpenSearchSettings, index: IndexSettings
    ) -> None:
        self.t = transport
        self.client = transport.client
        self.url = transport.url
        self.dim = dim
        self._s = settings
        self._index = index
        self.writer = new_writer()  # who this index's writes are recorded as (crash repair)
        self._inflight: set[str] = set()  # entries this index is writing now
        self._inflight_lock = threading.Lock()
        self._unsettled: set[str] = set()  # entries this index's writes left unfinished
        p = settings.index_prefix
        self.chunks_alias, self.documents_alias, self.meta_alias = (
            f"{p}-chunks",
            f"{p}-documents",
            f"{p}-meta",
        )

    # ---- opening ---------------------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        settings: OpenSearchSettings,
        *,
        dim: int,
        index: IndexSettings | None = None,
        model_id: str | None = None,
    ) -> OpenSearchIndex:
        """Connect, create the indexes on first use, and refuse a layout of another version, another
        vector dimension or another embedder (their stored vectors would be meaningless here)."""
        transport = connect(settings)
        ix = cls(transport, dim, settings, index or IndexSettings())
        try:
            transport.call("connect", transport.client.info, idempotent=True)
            ix._ensure_layout(model_id)
            ix._repair_on_open()
        except BaseException:
            ix.close()
            raise
        return ix

    def _repair_on_open(self) -> None:
        """Settle what crashed writers left (services/retrieval/opensearch_repair.py). A repair that
        fails is logged, not fatal: searches still serve, and the next open or write tries again."""
        try:
            self.repair()
        except RampartError as exc:
            log.warning("could not repair interrupted writes: %s", exc.message)

    def _ensure_layout(self, model_id: str | None) -> None:
        bodies = {
            self.chunks_alias: chunks_body(self._s, self._index, self.dim),
            self.documents_alias: documents_body(self._s),
            self.meta_alias: meta_body(self._s),
        }
        for alias, body in bodies.items():
            concrete = self._behind(alias)
            if concrete is None:
                body["mappings"]["_meta"] = {"rampart_schema": SCHEMA_VERSION, "dim": self.dim}
                body["aliases"] = {alias: {}}
                self._create(f"{alias}-v{SCHEMA_VERSION}", body)
                continue
            meta = self._mapping_meta(concrete)
            found = meta.get("rampart_schema")
            if found != SCHEMA_VERSION:
                raise RampartError(
                    ErrorCode.FAILED_PRECONDITION,
                    f"the OpenSearch index {concrete} (alias {alias}) at {self.url} has layout version "
                    f"{found}, this Rampart reads version {SCHEMA_VERSION}; migrate it with {MIGRATE_HINT}",
                    index=concrete,
                    found=found,
                    expected=SCHEMA_VERSION,
                )
            if alias == self.chunks_alias and meta.get("dim") != self.dim:
                raise RampartError(
                    ErrorCode.FAILED_PRECONDITION,
                    f"the OpenSearch index {concrete} holds {meta.get('dim')}-d vectors, the embedder makes "
                    f"{self.dim}-d ones; use another RAMPART_OPENSEARCH__INDEX_PREFIX or the original model",
                    index=concrete,
                )
        if model_id is not None:
            self._check_model(model_id)

    def _behind(self, alias: str) -> str | None:
        return alias_target(self.t, alias, f"it must name one; fix it with {MIGRATE_HINT}")

    def _create(self, name: str, body: dict[str, Any]) -> None:
        try:
            self.t.call(
                "create index", lambda: self.client.indices.create(index=name, body=body), idempotent=False
            )
        except RampartError as exc:
            if "resource_already_exists_exception" not in exc.message:  # another process won the race
                raise

    def _mapping_meta(self, concrete: str) -> dict[str, Any]:
        got = self.t.call(
            "get mapping", lambda: self.client.indices.get_mapping(index=concrete), idempotent=True
        )
        meta = got[concrete]["mappings"].get("_meta", {})
        return meta if isinstance(meta, dict) else {}

    def _check_model(self, model_id: str) -> None:
        concrete = self._behind(self.chunks_alias)
        assert concrete is not None
        meta = self._mapping_meta(concrete)
        built_with = meta.get("embedder")
        if built_with is None:
            body = {"_meta": {**meta, "embedder": model_id}}
            self.t.call(
                "put mapping",
                lambda: self.client.indices.put_mapping(index=concrete, body=body),
                idempotent=True,
            )
        elif built_with != model_id:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"the OpenSearch index {concrete} at {self.url} was built with embedder {built_with}, but the "
                f"configured one is {model_id}; re-ingest under another RAMPART_OPENSEARCH__INDEX_PREFIX (or "
                "configure the original model)",
                built_with=built_with,
                configured=model_id,
            )

    def close(self) -> None:
        retire(self.writer)
        self.t.close()

    def _get_document(self, tenant: str, doc_id: str) -> dict[str, Any] | None:
        return self.t.mget(self.documents_alias, [doc_key(tenant, doc_id)], ["*"]).get(
            doc_key(tenant, doc_id)
        )

    # ---- writes ---------------------------------------------------------------------------------------
    def _allocate(self, n: int) -> list[int]:
        """``n`` fresh chunk ids from the shared counter (a scripted update: atomic across processes;
        not retried, since a repeat would skip ids — harmless, but not idempotent)."""
        if n == 0:
            return []
        body = {
            "script": {"source": "ctx._source.next += params.n", "lang": "painless", "params": {"n": n}},
            "upsert": {"next": n},
        }
        resp = self.t.call(
            "allocate chunk ids",
            lambda: self.client.update(
                index=self.meta_alias,
                id="cid",
                body=body,
                params={"retry_on_conflict": 10, "_source": "true"},
            ),
            idempotent=False,
        )
        end = int(resp["get"]["_source"]["next"])
        return list(range(end - n + 1, end + 1))

    def write(self, docs: Sequence[DocumentWrite]) -> None:
        """Upsert a batch in the steps of :mod:`services.retrieval.opensearch_repair`; what a crash
        between them leaves, the next open (or this index's next write of the document) repairs."""
        if not docs:
            return
        latest = {(d.tenant, d.doc_id): d for d in docs}  # a document twice in a batch: the last wins
        batch = list(latest.values())
        keys = [doc_key(d.tenant, d.doc_id) for d in batch]
        with self._inflight_lock:
            self._inflight.update(keys)
        try:
            self._write(batch, keys)
        except BaseException as exc:
            with self._inflight_lock:
                self._inflight.difference_update(keys)
                self._unsettled.update(keys)  # settled by this index's next write, or the next open
            if isinstance(exc, Exception):
                with contextlib.suppress(RampartError):  # best effort: an error, not a crash
                    self.repair(keys, ours=True)
                    self._unsettled.difference_update(keys)
            raise
        finally:
            with self._inflight_lock:
                self._inflight.difference_update(keys)

    def _write(self, batch: list[DocumentWrite], keys: list[str]) -> None:
        old = self.t.mget(self.documents_alias, keys, list(ENTRY_FIELDS))
        left = [k for k in keys if k in old and (old[k].get("pending_cids") or old[k].get("stale_cids"))]
        earlier = sorted(self._unsettled - set(keys))  # what this index's own earlier writes left
        if left or earlier:  # writes that never finished: settle them before this one
            self.repair([*left, *earlier], ours=True)
            self._unsettled.difference_update([*left, *earlier])
            old = self.t.mget(self.documents_alias, keys, list(ENTRY_FIELDS))
        cids = iter(self._allocate(sum(len(d.chunks) for d in batch)))
        new = {(d.tenant, d.doc_id): [next(cids) for _ in d.chunks] for d in batch}
        lease = self._lease_until(sum(len(d.chunks) for d in batch))
        self._mark_pending(batch, new, lease)
        failed = self._write_chunks(batch, new)
        stale = {
            (d.tenant, d.doc_id): [int(c) for c in old.get(k, {}).get("cids") or []]
            for d, k in zip(batch, keys, strict=True)
        }
        self._finish(batch, new, stale, failed, lease)
        if failed:
            names = ", ".join(f"{t}/{d}: {r}" for (t, d), r in sorted(failed.items()))
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"OpenSearch at {self.url} refused {len(failed)} of {len(batch)} documents ({names}); they are "
                "marked failed, the rest are indexed; send the failed ones again",
                failed=[f"{t}/{d}" for t, d in sorted(failed)],
            )

    def _lease_until(self, chunks: int) -> float:
        """Until when this write holds its documents: ``write_lease_s``, or longer when its requests,
        each at its timeout with every retry, could take longer."""
        s = self._s
        per_request = s.timeout_s * (s.retries + 1) + s.backoff_s * 1.2 * float(2 ** (s.retries + 1))
        requests = 5 + 2 * math.ceil(chunks / BULK_ACTIONS)
        return time.time() + max(s.write_lease_s, requests * per_request)

    def _mark_pending(
        self, batch: Sequence[DocumentWrite], new: dict[tuple[str, str], list[int]], lease: float
    ) -> None:
        """Step 1: each document ``pending``, with the ids its new chunks get (what a repair removes
        after a crash before step 3), this writer and its lease."""
        now = time.time()
        lines: list[dict[str, Any]] = []
        for d in batch:
            fields = {
                "tenant": d.tenant,
                "doc_id": d.doc_id,
                "version": d.version,
                "state": DocumentState.PENDING.value,
                "pending_cids": new[(d.tenant, d.doc_id)],
                "writer": self.writer,
                "lease_until": lease,
                "updated_at": now,
            }
            lines += [
                {"update": {"_index": self.documents_alias, "_id": doc_key(d.tenant, d.doc_id)}},
                {"doc": fields, "doc_as_upsert": True},
            ]
        self._raise_failed(self.t.bulk(lines, "mark documents pending", refresh=False), batch, "mark pending")

    def _write_chunks(
        self, batch: Sequence[DocumentWrite], new: dict[tuple[str, str], list[int]]
    ) -> dict[tuple[str, str], str]:
        """Step 2: the new chunks; returns the documents a chunk of which OpenSearch refused, with why."""
        lines: list[dict[str, Any]] = []
        owner: list[tuple[str, str]] = []
        for d in batch:
            for cid, cw in zip(new[(d.tenant, d.doc_id)], d.chunks, strict=True):
                lines += [
                    {"index": {"_index": self.chunks_alias, "_id": str(cid)}},
                    chunk_source(d, cid, cw),
                ]
                owner.append((d.tenant, d.doc_id))
        failed: dict[tuple[str, str], str] = {}
        for who, item in zip(owner, self.t.bulk(lines, "write chunks", refresh=True), strict=True):
            if "error" in item and who not in failed:
                failed[who] = item_reason(item)
        return failed

    def _finish(
        self,
        batch: Sequence[DocumentWrite],
        new: dict[tuple[str, str], list[int]],
        stale: dict[tuple[str, str], list[int]],
        failed: dict[tuple[str, str], str],
        lease: float,
    ) -> None:
        """Step 3: entries of the new versions (``indexed`` at once where no old chunk must go, else
        ``pending`` with ``stale_cids``), then the old chunks and a refused document's new ones
        deleted, then those documents ``indexed`` or ``failed``."""
        entries: list[dict[str, Any]] = []
        deletes: list[int] = []
        last: list[dict[str, Any]] = []
        for d in batch:
            who, key = (d.tenant, d.doc_id), doc_key(d.tenant, d.doc_id)
            if who in failed:
                deletes += new[who]
                error = f"OpenSearch refused a chunk of version {d.version}: {failed[who]}"
                last += self._entry_update(
                    key, {**CLEARED, "state": DocumentState.FAILED.value, "error": error}
                )
                continue
            source = indexed_source(d, new[who])
            if stale[who]:
                source.update(
                    state=DocumentState.PENDING.value,
                    stale_cids=stale[who],
                    writer=self.writer,
                    lease_until=lease,
                )
                deletes += stale[who]
                last += self._entry_update(key, {**CLEARED, "state": DocumentState.INDEXED.value})
            entries += [{"index": {"_index": self.documents_alias, "_id": key}}, source]
        if entries:
            self._raise_failed(
                self.t.bulk(entries, "record documents", refresh=not last), batch, "record documents"
            )
        if deletes:
            lines = [{"delete": {"_index": self.chunks_alias, "_id": str(c)}} for c in deletes]
            self._raise_failed(
                self.t.bulk(lines, "delete old chunks", refresh=True),
                batch,
                "delete old chunks",
                deletes_ok=True,
            )
        if last:
            self._raise_failed(self.t.bulk(last, "finish documents", refresh=True), batch, "finish documents")

    def _entry_update(self, key: str, fields: dict[str, Any]) -> list[dict[str, Any]]:
        return [
            {"update": {"_index": self.documents_alias, "_id": key}},
            {"doc": {**fields, "updated_at": time.time()}},
        ]

    def _raise_failed(
        self, items: list[dict[str, Any]], batch: Sequence[DocumentWrite], step: str, deletes_ok: bool = False
    ) -> None:
        bad = [item_reason(i) for i in items if "error" in i and not (deletes_ok and i.get("status") == 404)]
        if bad:
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"OpenSearch at {self.url} failed to {step} for {len(bad)} items of a batch of {len(batch)} "
                f"documents (first: {bad[0]}); send the batch again",
                url=self.url,
            )

    # ---- crash repair (services/retrieval/opensearch_repair.py) ------------------------------------------
    def repair(self, keys: Sequence[str] | None = None, *, ours: bool = False) -> tuple[int, int]:
        """Settle what writers that are gone left unfinished: the entries ``keys`` (``_id``s of the
        documents index), or every unfinished one (on open); ``ours``: ``keys`` are the caller's write,
        so what this index left on them is finished with. Returns (rolled forward, rolled back)."""
        entries = (
            self._unfinished()
            if keys is None
            else self.t.mget(self.documents_alias, keys, list(ENTRY_FIELDS))
        )
        now = time.time()
        with self._inflight_lock:
            inflight = set(self._inflight) - (set(keys or ()) if ours else set())
        gone = {
            k: e
            for k, e in entries.items()
            if unfinished(e) and writer_gone(e, me=self.writer, inflight=inflight, key=k, now=now)
        }
        if not gone:
            return 0, 0
        firsts = [str(e["cids"][0]) for e in gone.values() if e.get("cids")]
        got = self.t.mget(self.chunks_alias, firsts, ["cid", "version"]) if firsts else {}
        todo = plan(gone, {int(v["cid"]): int(v["version"]) for v in got.values()}, now)
        if todo.deletes:
            lines = [{"delete": {"_index": self.chunks_alias, "_id": str(c)}} for c in todo.deletes]
            items = self.t.bulk(lines, "repair: delete chunks", refresh=True)
            bad = [item_reason(i) for i in items if "error" in i and i.get("status") != 404]
            if bad:
                raise RampartError(
                    ErrorCode.UNAVAILABLE,
                    f"OpenSearch at {self.url} failed to delete chunks a crashed write left ({bad[0]}); "
                    "reopen the index to repair again",
                    url=self.url,
                )
        lines = [line for k, fields in todo.updates.items() for line in self._entry_update(k, fields)]
        items = self.t.bulk(lines, "repair: settle documents", refresh=True)
        if any("error" in i for i in items):
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"OpenSearch at {self.url} failed to settle documents a crashed write left "
                f"({next(item_reason(i) for i in items if 'error' in i)}); reopen the index to repair again",
                url=self.url,
            )
        log.warning(
            "repaired interrupted writes", extra={"forward": todo.forward, "back": todo.back, "url": self.url}
        )
        return todo.forward, todo.back

    def _unfinished(self) -> dict[str, dict[str, Any]]:
        """Every entry with a write in progress or left unfinished (paged by tenant and document)."""
        query = {
            "bool": {
                "should": [
                    {"term": {"state": DocumentState.PENDING.value}},
                    {"exists": {"field": "pending_cids"}},
                    {"exists": {"field": "stale_cids"}},
                ],
                "minimum_should_match": 1,
            }
        }
        # a search sees refreshed entries only, and a crashed writer's pending marks were not refreshed
        self.t.call(
            "refresh documents",
            lambda: self.client.indices.refresh(index=self.documents_alias),
            idempotent=True,
        )
        out: dict[str, dict[str, Any]] = {}
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "size": 1000,
                "_source": list(ENTRY_FIELDS),
                "query": query,
                "sort": [{"tenant": "asc"}, {"doc_id": "asc"}],
            }
            if after is not None:
                body["search_after"] = after
            hits = self.t.search(self.documents_alias, body, "find unfinished writes")
            out.update({str(h["_id"]): h["_source"] for h in hits})
            if len(hits) < body["size"]:
                return out
            after = hits[-1]["sort"]

    def delete(self, tenant: str, doc_id: str) -> bool:
        current = self._get_document(tenant, doc_id)
        if current is None or current.get("state") == DocumentState.DELETED.value:
            return False
        key = doc_key(tenant, doc_id)
        owned = [
            *current.get("cids", []),
            *(current.get("pending_cids") or []),
            *(current.get("stale_cids") or []),
        ]
        lines: list[dict[str, Any]] = [
            {"delete": {"_index": self.chunks_alias, "_id": str(c)}} for c in owned
        ]
        lines += [
            {"update": {"_index": self.documents_alias, "_id": key}},
            {
                "doc": {
                    **CLEARED,
                    "state": DocumentState.DELETED.value,
                    "chunks": 0,
                    "cids": [],
                    "name": None,
                    "first_cid": None,
                    "error": None,
                    "updated_at": time.time(),
                }
            },
        ]
        items = self.t.bulk(lines, "delete a document", refresh=True)
        bad = [item_reason(i) for i in items if "error" in i and i.get("status") != 404]
        if bad:
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"OpenSearch at {self.url} failed to delete {tenant}/{doc_id} ({bad[0]}); delete it again",
                url=self.url,
            )
        return True

    def mark(
        self, tenant: str, doc_id: str, version: int, state: DocumentState, *, error: str | None = None
    ) -> None:
        """Record a state without touching chunks. Not refreshed: ``status``/``current`` read it at once
        (real-time GET), and ingest marks every document it accepts, so waiting here would cost a
        refresh interval per document; ``named`` sees the new state within one interval. ``pending``
        (ingest's mark before it embeds) holds the document for this writer under a lease, so that a
        crash before the write is settled too."""
        pending = state is DocumentState.PENDING
        fields = {
            "tenant": tenant,
            "doc_id": doc_id,
            "version": version,
            "state": state.value,
            "error": error,
            "writer": self.writer if pending else None,
            "lease_until": self._lease_until(0) if pending else None,
            "updated_at": time.time(),
        }
        body = {"doc": fields, "doc_as_upsert": True}
        self.t.call(
            "mark a document",
            lambda: self.client.update(
                index=self.documents_alias,
                id=doc_key(tenant, doc_id),
                body=body,
                params={"retry_on_conflict": 5},
            ),
            idempotent=True,
        )

    def status(self, tenant: str, doc_id: str) -> DocumentStatus | None:
        d = self._get_document(tenant, doc_id)
        if d is None:
            return None
        return DocumentStatus(
            id=doc_id,
            tenant=tenant,
            version=int(d["version"]),
            state=DocumentState(d["state"]),
            chunks=int(d.get("chunks") or 0),
            error=d.get("error"),
            updated_at=float(d.get("updated_at") or 0.0),
            readers=[str(t) for t in d.get("acl") or []],
        )

    def current(self, tenant: str, doc_id: str) -> tuple[int, str, DocumentState] | None:
        d = self._get_document(tenant, doc_id)
        if d is None:
            return None
        return int(d["version"]), str(d.get("content_hash") or ""), DocumentState(d["state"])

    def token_length(self, text: str) -> int:
        return self.token_lengths([text])[0]

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """As few ``_analyze`` calls as the node's token limit allows (``index.analyze.max_token_count``,
        10,000 by default: a batch of 128 SciFact abstracts is about 40,000 tokens)."""
        out: list[int] = []
        for part in analyze_groups(texts, ANALYZE_TOKENS):
            out += self._token_lengths(part)
        return out

    def _token_lengths(self, texts: Sequence[str]) -> list[int]:
        """One ``_analyze`` call for ``texts``. Its tokens carry offsets into the texts laid end to end
        (Java string lengths, one apart), which assign each token to its text."""
        if not texts:
            return []
        body = {"analyzer": ANALYZER, "text": list(texts)}
        resp = self.t.call(
            "analyze",
            lambda: self.client.indices.analyze(index=self.chunks_alias, body=body),
            idempotent=True,
        )
        ends: list[int] = []
        offset = 0
        for t in texts:
            offset += len(t.encode("utf-16-le")) // 2
            ends.append(offset)
            offset += 1  # the analyzer's offset gap between values
        counts = [0] * len(texts)
        i = 0
        for token in resp.get("tokens", []):
            while i < len(ends) - 1 and token["start_offset"] >= ends[i]:
                i += 1
            counts[i] += 1
        return counts

    # ---- reads ----------------------------------------------------------------------------------------
    @staticmethod
    def _scope(principal: Principal, filters: SearchFilters | None) -> list[dict[str, Any]]:
        """The tenant + ACL filter (and the caller's filters), applied inside every search."""
        out: list[dict[str, Any]] = [
            {"term": {"tenant": principal.tenant}},
            {"terms": {"acl": principal.acl_tokens()}},
        ]
        if filters is not None:
            if filters.doc_ids:
                out.append({"terms": {"doc_id": filters.doc_ids}})
            if filters.sources:
                out.append({"terms": {"source": filters.sources}})
            out += [{"term": {"meta": f"{k}\x1f{json.dumps(v)}"}} for k, v in filters.metadata.items()]
        return out

    def bm25(
        self,
        query: str,
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
        restrict: Sequence[int] | None = None,
    ) -> Hits:
        if limit <= 0 or (restrict is not None and not restrict):
            return []
        scope = self._scope(principal, filters)
        if restrict is not None:
            scope.append({"terms": {"cid": list(restrict)}})
        body = {
            "size": limit,
            "_source": False,
            "track_total_hits": False,
            "query": {"bool": {"must": [{"match": {"text": query}}], "filter": scope}},
            "sort": [{"_score": "desc"}, {"cid": "asc"}],
            "track_scores": True,
        }
        return [
            (int(h["_id"]), float(h["_score"])) for h in self.t.search(self.chunks_alias, body, "bm25 search")
        ]

    def _knn(
        self, field: str, vector: npt.NDArray[np.float32], scope: list[dict[str, Any]], k: int
    ) -> dict[str, Any]:
        """A k-NN query whose filter runs inside the HNSW search (Lucene's filtered search), so the
        top ``k`` are the top ``k`` the principal may read, not a post-filtered remainder."""
        return {
            "knn": {
                field: {
                    "vector": floats(vector),
                    "k": k,
                    "filter": {"bool": {"filter": scope}},
                    "method_parameters": {"ef_search": max(self._s.knn_ef_search, k)},
                }
            }
        }

    def _cosine(self, score: float) -> float:
        """OpenSearch's k-NN score back to the cosine the embedded index reports."""
        if self._s.knn_space == "cosinesimil":
            return 2.0 * score - 1.0
        if self._s.knn_space == "innerproduct":
            return score - 1.0 if score >= 1.0 else 1.0 - 1.0 / score
        return score

    def dense(
        self,
        vector: npt.NDArray[np.float32],
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
    ) -> Hits:
        if limit <= 0:
            return []
        body = {
            "size": limit,
            "_source": False,
            "track_total_hits": False,
            "query": self._knn("vector", vector, self._scope(principal, filters), limit),
        }
        hits = self.t.search(self.chunks_alias, body, "dense search")
        return [(int(h["_id"]), self._cosine(float(h["_score"]))) for h in hits]

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
        keys = list(dict.fromkeys(k for t in texts for k in mentioned_names(t, MAX_NAMED_KEYS)))[
            :MAX_NAMED_KEYS
        ]
        if not keys:
            return []
        body = {
            "size": 10_000,
            "_source": ["name", "doc_id", "first_cid"],
            "track_total_hits": False,
            "query": {
                "bool": {
                    "filter": [
                        {"term": {"tenant": principal.tenant}},
                        {"terms": {"name": keys}},
                        {"term": {"state": DocumentState.INDEXED.value}},
                        {"exists": {"field": "first_cid"}},
                    ]
                }
            },
        }
        rows = [
            (str(h["_source"]["name"]), str(h["_source"]["doc_id"]), int(h["_source"]["first_cid"]))
            for h in self.t.search(self.documents_alias, body, "named lookup")
        ]
        if not rows:
            return []
        readable = self._readable([cid for _, _, cid in rows], principal, filters)
        rank = {k: i for i, k in enumerate(keys)}
        found = sorted((rank[name], doc, cid) for name, doc, cid in rows if cid in readable)
        out: Hits = []
        seen: set[str] = set()
        for _, doc, cid in found:
            if doc not in seen:
                seen.add(doc)
                out.append((cid, 1.0))
        return out[:limit]

    def _readable(self, cids: Sequence[int], principal: Principal, filters: SearchFilters | None) -> set[int]:
        """The chunks among ``cids`` that ``principal`` may read (and that pass ``filters``)."""
        body = {
            "size": len(cids),
            "_source": False,
            "track_total_hits": False,
            "query": {"bool": {"filter": [*self._scope(principal, filters), {"terms": {"cid": list(cids)}}]}},
        }
        return {int(h["_id"]) for h in self.t.search(self.chunks_alias, body, "ACL check")}

    def _vectors(self, field: str, cids: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        got = self.t.mget(self.chunks_alias, [str(c) for c in cids], [field])
        return {int(k): np.asarray(v[field], dtype=np.float32) for k, v in got.items() if field in v}

    def cosine(self, vector: npt.NDArray[np.float32], cids: Sequence[int]) -> dict[int, float]:
        return {cid: float(np.dot(v, vector)) for cid, v in self._vectors("vector", cids).items()}

    def stored_vectors(self, cids: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        return self._vectors("vector", cids) if cids else {}

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
        document; one multi-search of filtered k-NN queries on the claim vectors."""
        if not cids:
            return {}
        got = self.t.mget(self.chunks_alias, [str(c) for c in cids], ["claim_vector", "doc_id"])
        mine = {int(k): v for k, v in got.items() if "claim_vector" in v}
        if not mine:
            return {}
        order = [c for c in cids if c in mine]
        depth = limit * COPY_SEARCH_FACTOR + COPY_SEARCH_EXTRA
        scope = self._scope(principal, None)
        lines: list[dict[str, Any]] = []
        for c in order:
            query = self._knn(
                "claim_vector", np.asarray(mine[c]["claim_vector"], dtype=np.float32), scope, depth
            )
            lines += [{"index": self.chunks_alias}, {"size": depth, "_source": ["doc_id"], "query": query}]
        resp = self.t.call("copy search", lambda: self.client.msearch(body=lines), idempotent=True)
        doc_of = {c: str(mine[c]["doc_id"]) for c in order}
        found: list[list[tuple[int, float]]] = []
        for r in resp["responses"]:
            if "error" in r:
                raise RampartError(
                    ErrorCode.UNAVAILABLE,
                    f"copy search on {self.chunks_alias} at {self.url} failed: {r['error']}",
                    url=self.url,
                )
            complete(r, self.chunks_alias, self.url)
            hits = r["hits"]["hits"]
            for h in hits:
                doc_of[int(h["_id"])] = str(h["_source"]["doc_id"])
            found.append([(int(h["_id"]), self._cosine(float(h["_score"]))) for h in hits])
        return closest_per_document(order, found, doc_of, limit)

    def chunks(self, cids: Sequence[int]) -> dict[int, Chunk]:
        if not cids:
            return {}
        got = self.t.mget(self.chunks_alias, [str(c) for c in cids], ["chunk"])
        return {int(k): Chunk.model_validate(v["chunk"]) for k, v in got.items()}

    def stats(self) -> dict[str, int]:
        count = self.t.call(
            "count chunks", lambda: self.client.count(index=self.chunks_alias), idempotent=True
        )
        body = {"size": 0, "aggs": {"states": {"terms": {"field": "state", "size": 10}}}}
        resp = self.t.call(
            "count documents",
            lambda: self.client.search(index=self.documents_alias, body=body),
            idempotent=True,
        )
        complete(resp, self.documents_alias, self.url)
        states = {b["key"]: int(b["doc_count"]) for b in resp["aggregations"]["states"]["buckets"]}
        return {"chunks": int(count["count"]), **{f"documents_{k}": v for k, v in states.items()}}
