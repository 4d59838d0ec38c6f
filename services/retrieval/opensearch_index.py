"""The OpenSearch index: the ``SearchIndex`` of ``index.backend=opensearch`` (docs/opensearch.md).

Unlike the embedded index, any number of processes share it: the retrieval-service replicas and the
ingest workers all talk to one OpenSearch. Three indexes, each a versioned index behind an alias
(``<prefix>-chunks`` → ``<prefix>-chunks-v4``; a new layout is a new version that ``rampart index
migrate`` builds and swaps the alias to: :mod:`services.retrieval.opensearch_migrate`):

- **chunks**: one document per chunk, ``_id`` = its chunk id. BM25 text (k1/b from ``index.bm25_*``,
  scored with the caller's tenant's statistics by :data:`BM25_SCRIPT`: no tenant's writes move
  another's scores), the 384-d HNSW vector and the claim vector (Lucene engine here), and keyword
  fields that every read filters on *inside* the search: tenant, ACL tokens, document id and version,
  source, trust; and the chunk's entity keys, the knowledge graph's mentions (:class:`GraphReads`:
  postings are a terms aggregation inside a search scoped like BM25's).
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
Every search returns only chunks their document's entry records (:meth:`OpenSearchIndex._live_search`):
never the new chunks of a write that has not recorded them yet, nor the old ones after it has.

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
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
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
from services.retrieval.graph.reads import GraphReads, check_postings
from services.retrieval.index import Hits
from services.retrieval.links.reads import MAX_NAMED_KEYS, LinkReads
from services.retrieval.opensearch_claim import FIRST_WAIT_S, Claims, Held, held_by_other, newer_version
from services.retrieval.opensearch_layout import (
    ANALYZER,
    POSTINGS_TOP_HITS,
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
    naming,
)

log = logging.getLogger(__name__)

POSTINGS_BATCH = 256  # keys per multi-search of entity postings past POSTINGS_TOP_HITS
POSTINGS_PAGE = 10_000  # hits per search: OpenSearch's default index.max_result_window
# searches per read when chunks no entry records turn up (a write between its steps, a crash's
# leftovers): each round excludes, inside the query, the ones the rounds before found. One write in
# flight per document hides at most its old or its new chunks, so a second round is the rare case
LIVE_ROUNDS = 4

# BM25 with the caller's tenant's statistics (issue 36, point 5; docs/security.md, "No leaks through
# scores"), computed on the node: Lucene's own BM25 takes IDF and average length from the shard, which
# holds every tenant. The formula is the embedded index's (bm25_index.bm25_scores): per query term,
# weight (its count in the query x IDF x (k1 + 1)) x f / (f + k1 (1 - b + b dl / avgdl)); f from
# termFreq (painless score context, OpenSearch 2.10+), dl from token_len's doc values (layout v4)
BM25_SCRIPT = """
double norm = params.k1 * (1.0 - params.b + params.b * doc['token_len'].value / params.avgdl);
double s = 0.0;
for (int i = 0; i < params.terms.size(); ++i) {
  int f = termFreq('text', params.terms.get(i));
  if (f > 0) { s += params.weights.get(i) * f / (f + norm); }
}
return s;
"""

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


@dataclass
class _Finish:
    """What the last steps of a write carry between them (per document: (tenant, doc_id))."""

    seq: dict[str, tuple[int, int]]  # entry _id -> (seq_no, primary_term) the next write names
    stale: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    deletes: list[int] = field(default_factory=list)
    last: list[tuple[tuple[str, str], dict[str, Any]]] = field(default_factory=list)
    failed: dict[tuple[str, str], RampartError] = field(default_factory=dict)


def _cond(seq: tuple[int, int]) -> dict[str, int]:
    """The condition of a bulk action that must land only on the entry as last read or written."""
    return {"if_seq_no": seq[0], "if_primary_term": seq[1]}


class OpenSearchIndex(CheckReads, LinkReads, GraphReads):
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
        self._inflight_free = threading.Condition(self._inflight_lock)
        self._unsettled: set[str] = set()  # entries this index's writes left unfinished
        p = settings.index_prefix
        self.chunks_alias, self.documents_alias, self.meta_alias = (
            f"{p}-chunks",
            f"{p}-documents",
            f"{p}-meta",
        )
        self.claims = Claims(
            transport,
            self.documents_alias,
            me=self.writer,
            wait_s=settings.claim_wait_s,
            repair=lambda keys: self.repair(keys, ours=True),
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
        """Upsert a batch in the steps of :mod:`services.retrieval.opensearch_repair`, each document
        claimed first (:mod:`services.retrieval.opensearch_claim`: another process writing it is waited
        for); what a crash between the steps leaves, the next open (or this index's next write of the
        document) repairs. Raises naming the documents that did not land (the rest did)."""
        if not docs:
            return
        latest = {(d.tenant, d.doc_id): d for d in docs}  # a document twice in a batch: the last wins
        batch = list(latest.values())
        keys = [doc_key(d.tenant, d.doc_id) for d in batch]
        self._acquire(keys)
        try:
            self._write(batch, keys)
        except BaseException as exc:
            with self._inflight_lock:
                self._unsettled.update(keys)  # settled by this index's next write, or the next open
            if isinstance(exc, Exception):
                with contextlib.suppress(RampartError):  # best effort: an error, not a crash
                    self.repair(keys, ours=True)
                    self._unsettled.difference_update(keys)
            raise
        finally:
            self._release(keys)

    def _acquire(self, keys: Sequence[str]) -> None:
        """Hold ``keys`` in this process: two threads of one index share its writer id, so the
        claims cannot tell them apart (the retrieval service writes for every ingest worker)."""
        with self._inflight_lock:
            while any(k in self._inflight for k in keys):
                self._inflight_free.wait(1.0)
            self._inflight.update(keys)

    def _release(self, keys: Sequence[str]) -> None:
        with self._inflight_lock:
            self._inflight.difference_update(keys)
            self._inflight_free.notify_all()

    def _write(self, batch: list[DocumentWrite], keys: list[str]) -> None:
        earlier = sorted(self._unsettled - set(keys))  # what this index's own earlier writes left
        if earlier:
            self.repair(earlier, ours=True)
            self._unsettled.difference_update(earlier)
        cids = iter(self._allocate(sum(len(d.chunks) for d in batch)))
        new = {(d.tenant, d.doc_id): [next(cids) for _ in d.chunks] for d in batch}
        lease = self._lease_until(sum(len(d.chunks) for d in batch))
        held, refused = self._mark_pending(batch, new, lease)
        failed: dict[tuple[str, str], RampartError] = {
            (d.tenant, d.doc_id): refused[k] for d, k in zip(batch, keys, strict=True) if k in refused
        }
        claimed = [d for d, k in zip(batch, keys, strict=True) if k in held]
        if claimed:
            rejected = self._write_chunks(claimed, new)
            failed |= self._finish(claimed, new, rejected, lease, held)
        if failed:
            names = ", ".join(f"{t}/{d}: {e.message}" for (t, d), e in sorted(failed.items()))
            codes = {e.code for e in failed.values()}
            raise RampartError(
                ErrorCode.CONFLICT if codes == {ErrorCode.CONFLICT} else ErrorCode.UNAVAILABLE,
                f"OpenSearch at {self.url} refused {len(failed)} of {len(batch)} documents ({names}); they "
                "are marked failed or left to the writer that holds them, the rest are indexed; send the "
                "failed ones again",
                failed=[f"{t}/{d}" for t, d in sorted(failed)],
                conflicts=[
                    f"{t}/{d}" for (t, d), e in sorted(failed.items()) if e.code is ErrorCode.CONFLICT
                ],
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
    ) -> tuple[dict[str, Held], dict[str, RampartError]]:
        """Step 1, the claim: each document ``pending``, with the ids its new chunks get (what a
        repair removes after a crash before step 3), this writer and its lease; a document with a newer
        stored version, or held by another live writer past ``claim_wait_s``, is refused."""
        now = time.time()
        wanted: dict[str, dict[str, Any]] = {}
        versions: dict[str, int] = {}
        for d in batch:
            key = doc_key(d.tenant, d.doc_id)
            versions[key] = d.version
            wanted[key] = {
                "tenant": d.tenant,
                "doc_id": d.doc_id,
                "version": d.version,
                "state": DocumentState.PENDING.value,
                "pending_cids": new[(d.tenant, d.doc_id)],
                "writer": self.writer,
                "lease_until": lease,
                "updated_at": now,
            }
        return self.claims.claim(
            wanted, check=lambda k, e: newer_version(versions[k])(k, e), what="mark documents pending"
        )

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
        rejected: dict[tuple[str, str], str],
        lease: float,
        held: dict[str, Held],
    ) -> dict[tuple[str, str], RampartError]:
        """Step 3: entries of the new versions (``indexed`` at once where no old chunk must go, else
        ``pending`` with ``stale_cids``), then the old chunks and a refused document's new ones
        deleted, then those documents ``indexed`` or ``failed``. Every entry write is conditional on
        the claim: a document another process took over meanwhile (this write's lease ran out) loses
        its new chunks and fails here instead of overwriting. Returns the documents that failed."""
        fin = _Finish(seq={k: (h.seq_no, h.primary_term) for k, h in held.items()})
        entries: list[tuple[tuple[str, str], dict[str, Any]]] = []
        for d in batch:
            who, key = (d.tenant, d.doc_id), doc_key(d.tenant, d.doc_id)
            if who in rejected:
                fin.deletes += new[who]
                error = f"OpenSearch refused a chunk of version {d.version}: {rejected[who]}"
                fin.last.append((who, {**CLEARED, "state": DocumentState.FAILED.value, "error": error}))
                fin.failed[who] = RampartError(ErrorCode.UNAVAILABLE, error)
                continue
            fin.stale[who] = [int(c) for c in (held[key].before or {}).get("cids") or []]
            source = indexed_source(d, new[who])
            if fin.stale[who]:
                source.update(
                    state=DocumentState.PENDING.value,
                    stale_cids=fin.stale[who],
                    writer=self.writer,
                    lease_until=lease,
                )
                fin.last.append((who, {**CLEARED, "state": DocumentState.INDEXED.value}))
            entries.append((who, source))
        if entries:
            self._record(entries, new, fin, len(batch))
        if fin.deletes:
            lines = [{"delete": {"_index": self.chunks_alias, "_id": str(c)}} for c in fin.deletes]
            items = self.t.bulk(lines, "delete old chunks", refresh=True)
            bad = [item_reason(i) for i in items if "error" in i and i.get("status") != 404]
            if bad:
                raise self._step_failed("delete old chunks", bad, len(batch))
        if fin.last:
            self._settle(new, fin, len(batch))
        return fin.failed

    def _record(
        self,
        entries: list[tuple[tuple[str, str], dict[str, Any]]],
        new: dict[tuple[str, str], list[int]],
        fin: _Finish,
        size: int,
    ) -> None:
        """Step 3's entries, each conditional on its claim; the old chunks of those that landed are
        queued for deletion."""
        lines: list[dict[str, Any]] = []
        for who, source in entries:
            key = doc_key(*who)
            lines += [{"index": {"_index": self.documents_alias, "_id": key, **_cond(fin.seq[key])}}, source]
        items = self.t.bulk(lines, "record documents", refresh=not fin.last)
        for (who, _), item in zip(entries, items, strict=True):
            key = doc_key(*who)
            if "error" not in item:
                fin.seq[key] = (int(item["_seq_no"]), int(item["_primary_term"]))
                fin.deletes += fin.stale[who]
            elif item.get("status") == 409 and (landed := self._landed(key, new[who])) is not None:
                fin.seq[key] = landed  # a retried request whose first attempt landed
                fin.deletes += fin.stale[who]
            elif item.get("status") == 409:  # taken over: the old chunks are the new holder's now
                fin.deletes += new[who]
                fin.last = [(w, f) for w, f in fin.last if w != who]
                fin.failed[who] = self._taken_over(who)
            else:
                raise self._step_failed("record documents", [item_reason(item)], size)

    def _settle(self, new: dict[tuple[str, str], list[int]], fin: _Finish, size: int) -> None:
        """The last step: documents ``indexed`` (old chunks gone) or ``failed``, conditionally."""
        lines: list[dict[str, Any]] = []
        for who, fields in fin.last:
            key = doc_key(*who)
            lines += [
                {"update": {"_index": self.documents_alias, "_id": key, **_cond(fin.seq[key])}},
                {"doc": {**fields, "updated_at": time.time()}},
            ]
        items = self.t.bulk(lines, "finish documents", refresh=True)
        for (who, _), item in zip(fin.last, items, strict=True):
            if "error" not in item or who in fin.failed:
                continue
            if item.get("status") != 409:
                raise self._step_failed("finish documents", [item_reason(item)], size)
            if self._landed(doc_key(*who), new[who]) is None:
                fin.failed[who] = self._taken_over(who)
            # else settled as this version (a retried request, or a repair rolled it forward)

    def _landed(self, key: str, cids: list[int]) -> tuple[int, int] | None:
        """The entry's (seq_no, primary_term) when it records ``cids`` as its chunks (this write's
        version is the stored one), else ``None``."""
        found = self.claims.read([key]).get(key)
        if found is None or [int(c) for c in found[0].get("cids") or []] != cids:
            return None
        return found[1], found[2]

    def _taken_over(self, who: tuple[str, str]) -> RampartError:
        return RampartError(
            ErrorCode.UNAVAILABLE,
            f"{who[0]}/{who[1]} was taken over by another writer while this write held it (its lease, "
            "RAMPART_OPENSEARCH__WRITE_LEASE_S, ran out); this write's chunks were removed; send it again",
        )

    def _step_failed(self, step: str, bad: list[str], size: int) -> RampartError:
        return RampartError(
            ErrorCode.UNAVAILABLE,
            f"OpenSearch at {self.url} failed to {step} for {len(bad)} items of a batch of {size} "
            f"documents (first: {bad[0]}); send the batch again",
            url=self.url,
        )

    # ---- crash repair (services/retrieval/opensearch_repair.py) ------------------------------------------
    def repair(self, keys: Sequence[str] | None = None, *, ours: bool = False) -> tuple[int, int]:
        """Settle what writers that are gone left unfinished: the entries ``keys`` (``_id``s of the
        documents index), or every unfinished one (on open); ``ours``: ``keys`` are the caller's write,
        so what this index left on them is finished with. Returns (rolled forward, rolled back).

        Each entry is settled only if it is still what was read (a conditional update): another process
        repairing or claiming it meanwhile wins, and deleting the same crashed chunks twice is harmless
        (chunk ids are never reused)."""
        entries = self._unfinished() if keys is None else self.claims.read(list(keys))
        now = time.time()
        with self._inflight_lock:
            inflight = set(self._inflight) - (set(keys or ()) if ours else set())
        gone = {
            k: e
            for k, (e, _, _) in entries.items()
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
        order = list(todo.updates)
        settle: list[dict[str, Any]] = []
        for k in order:
            _, seq_no, term = entries[k]
            settle += [
                {"update": {"_index": self.documents_alias, "_id": k, **_cond((seq_no, term))}},
                {"doc": {**todo.updates[k], "updated_at": time.time()}},
            ]
        items = self.t.bulk(settle, "repair: settle documents", refresh=True)
        bad = [item_reason(i) for i in items if "error" in i and i.get("status") != 409]
        if bad:
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"OpenSearch at {self.url} failed to settle documents a crashed write left ({bad[0]}); "
                "reopen the index to repair again",
                url=self.url,
            )
        settled = {k for k, i in zip(order, items, strict=True) if "error" not in i}
        forward = sum(1 for k in settled if gone[k].get("stale_cids"))
        back = len(settled) - forward
        log.warning("repaired interrupted writes", extra={"forward": forward, "back": back, "url": self.url})
        return forward, back

    def _unfinished(self) -> dict[str, tuple[dict[str, Any], int, int]]:
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
        out: dict[str, tuple[dict[str, Any], int, int]] = {}
        after: list[Any] | None = None
        while True:
            body: dict[str, Any] = {
                "size": 1000,
                "seq_no_primary_term": True,
                "_source": list(ENTRY_FIELDS),
                "query": query,
                "sort": [{"tenant": "asc"}, {"doc_id": "asc"}],
            }
            if after is not None:
                body["search_after"] = after
            hits = self.t.search(self.documents_alias, body, "find unfinished writes")
            out.update(
                {str(h["_id"]): (h["_source"], int(h["_seq_no"]), int(h["_primary_term"])) for h in hits}
            )
            if len(hits) < body["size"]:
                return out
            after = hits[-1]["sort"]

    def delete(self, tenant: str, doc_id: str) -> bool:
        """Delete the document's chunks, then mark its entry ``deleted`` if it is still what was read;
        a document another live process is writing is waited for (``claim_wait_s``), so the delete
        lands after that write rather than under it."""
        key = doc_key(tenant, doc_id)
        self._acquire([key])
        try:
            return self._delete(tenant, doc_id, key)
        finally:
            self._release([key])

    def _delete(self, tenant: str, doc_id: str, key: str) -> bool:
        deadline = time.monotonic() + self._s.claim_wait_s
        delay = FIRST_WAIT_S
        sent = False  # a retried request whose first attempt landed reads back as deleted
        while True:
            found = self.claims.read([key]).get(key)
            if found is None or found[0].get("state") == DocumentState.DELETED.value:
                return sent
            current, seq_no, term = found
            if held_by_other(current, key, me=self.writer, now=time.time()):
                if time.monotonic() >= deadline:
                    raise RampartError(
                        ErrorCode.UNAVAILABLE,
                        f"{tenant}/{doc_id} is being written by another process (writer "
                        f"{current.get('writer')}) and was still held after {self._s.claim_wait_s:.0f} s "
                        "(RAMPART_OPENSEARCH__CLAIM_WAIT_S); delete it again once that write finishes",
                    )
                time.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            owned = [
                *current.get("cids", []),
                *(current.get("pending_cids") or []),
                *(current.get("stale_cids") or []),
            ]
            lines: list[dict[str, Any]] = [
                {"delete": {"_index": self.chunks_alias, "_id": str(c)}} for c in owned
            ]
            lines += [
                {"update": {"_index": self.documents_alias, "_id": key, **_cond((seq_no, term))}},
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
            sent = True
            bad = [item_reason(i) for i in items if "error" in i and i.get("status") not in (404, 409)]
            if bad:
                raise RampartError(
                    ErrorCode.UNAVAILABLE,
                    f"OpenSearch at {self.url} failed to delete {tenant}/{doc_id} ({bad[0]}); delete it again",
                    url=self.url,
                )
            if items[-1].get("status") != 409:
                return True
            if time.monotonic() >= deadline:  # the entry kept changing: someone else keeps writing it
                raise RampartError(
                    ErrorCode.UNAVAILABLE,
                    f"{tenant}/{doc_id} kept changing under its delete for {self._s.claim_wait_s:.0f} s "
                    "(RAMPART_OPENSEARCH__CLAIM_WAIT_S); delete it again",
                )

    def mark(
        self, tenant: str, doc_id: str, version: int, state: DocumentState, *, error: str | None = None
    ) -> None:
        """Record a state without touching chunks, as a claim (:mod:`.opensearch_claim`): a document
        another live process is writing is waited for, and a newer stored version is never
        overwritten (``pending``: refused as ``CONFLICT``; any other state: left as it is, the newer
        version's state stands). Not refreshed: ``status``/``current`` read it at once (real-time GET),
        and ingest marks every document it accepts, so waiting here would cost a refresh interval per
        document; ``named`` sees the new state within one interval. ``pending`` (ingest's mark before it
        embeds) holds the document for this writer under a lease, so that a crash before the write is
        settled too, and another process's write of it waits."""
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
        key = doc_key(tenant, doc_id)
        self._acquire([key])
        try:
            _, refused = self.claims.claim(
                {key: fields}, check=newer_version(version), what="mark a document"
            )
        finally:
            self._release([key])
        err = refused.get(key)
        if err is None:
            return
        if err.code is ErrorCode.CONFLICT and not pending:
            log.info("a newer version's state stands", extra={"doc_id": doc_id, "reason": err.message})
            return
        raise err

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
        params = self._tenant_bm25(principal.tenant, self._analyze(query))
        if params is None:
            return []

        def body(hide: list[dict[str, Any]]) -> dict[str, Any]:
            matched = {"bool": {"must": [{"match": {"text": query}}], "filter": [*scope, *hide]}}
            script = {"source": BM25_SCRIPT, "lang": "painless", "params": params}
            return {
                "size": limit,
                "_source": False,
                "docvalue_fields": ["doc_id"],
                "track_total_hits": False,
                "query": {"script_score": {"query": matched, "script": script}},
                "sort": [{"_score": "desc"}, {"cid": "asc"}],
                "track_scores": True,
            }

        hits = self._live_search(body, principal.tenant, "bm25 search")
        return [(int(h["_id"]), float(h["_score"])) for h in hits]

    def _analyze(self, text: str) -> list[str]:
        """``text``'s terms as the ``text`` field indexes them (its analyser, one ``_analyze`` call)."""
        body = {"analyzer": ANALYZER, "text": text}
        with naming(self.chunks_alias, "bm25 search (analysing the query)"):
            resp = self.t.call(
                "analyze",
                lambda: self.client.indices.analyze(index=self.chunks_alias, body=body),
                idempotent=True,
            )
        return [str(t["token"]) for t in resp.get("tokens", [])]

    def _tenant_bm25(self, tenant: str, terms: list[str]) -> dict[str, Any] | None:
        """The BM25 script's parameters from ``tenant``'s own statistics: its chunk count, their total
        analysed length and each term's document frequency among them, counted in one multi-search
        (exact counts). ``None`` when no term of the query occurs in the tenant's chunks."""
        counts = Counter(terms)
        unique = list(counts)
        if not unique:  # only stop words: the match query matches nothing either
            return None
        own = {"term": {"tenant": tenant}}
        lines: list[dict[str, Any]] = [
            {"index": self.chunks_alias},
            {
                "size": 0,
                "track_total_hits": True,
                "query": own,
                "aggs": {"length": {"sum": {"field": "token_len"}}},
            },
        ]
        for term in unique:
            lines += [
                {"index": self.chunks_alias},
                {
                    "size": 0,
                    "track_total_hits": True,
                    "query": {"bool": {"filter": [own, {"term": {"text": term}}]}},
                },
            ]
        first, *per_term = self._msearch_responses(lines, "bm25 statistics")
        n = int(first["hits"]["total"]["value"])
        freqs = [int(r["hits"]["total"]["value"]) for r in per_term]
        k1, b = self._index.bm25_k1, self._index.bm25_b
        kept = [(t, df) for t, df in zip(unique, freqs, strict=True) if df > 0]
        if not kept or n == 0:
            return None
        return {
            "terms": [t for t, _ in kept],
            "weights": [
                counts[t] * math.log(1.0 + (n - df + 0.5) / (df + 0.5)) * (k1 + 1.0) for t, df in kept
            ],
            "k1": k1,
            "b": b,
            "avgdl": max(float(first["aggregations"]["length"]["value"]) / n, 1e-9),
        }

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
        scope = self._scope(principal, filters)

        def body(hide: list[dict[str, Any]]) -> dict[str, Any]:
            return {
                "size": limit,
                "_source": False,
                "docvalue_fields": ["doc_id"],
                "track_total_hits": False,
                "query": self._knn("vector", vector, [*scope, *hide], limit),
            }

        hits = self._live_search(body, principal.tenant, "dense search")
        return [(int(h["_id"]), self._cosine(float(h["_score"]))) for h in hits]

    # ---- what a search sees: the chunks each document's entry records --------------------------------
    def _owned(self, tenant: str, found: Mapping[int, str], *, indexed: bool = False) -> set[int]:
        """The chunks among ``found`` (chunk id → its document) that their document's entry records as
        its chunks (``indexed``: of an ``indexed`` entry only, as the graph's reads want). A write puts
        its new chunks beside the old ones before it records them (services/retrieval/opensearch_repair.py,
        steps 2-4), and a crash leaves them so until a repair; the entry, read here in real time, says
        which of the two versions is the document: its old chunks up to step 3, its new ones after."""
        if not found:
            return set()
        keys = sorted({doc_key(tenant, d) for d in found.values()})
        entries = self.t.mget(self.documents_alias, keys, ["state", "cids"])
        recorded = {
            k: {int(c) for c in e.get("cids") or []}
            for k, e in entries.items()
            if not indexed or e.get("state") == DocumentState.INDEXED.value
        }
        return {cid for cid, d in found.items() if cid in recorded.get(doc_key(tenant, d), ())}

    def _live_search(
        self, body: Callable[[list[dict[str, Any]]], dict[str, Any]], tenant: str, what: str
    ) -> list[dict[str, Any]]:
        """The hits of the search ``body(hide)`` builds (``hide``: filter clauses to add) that their
        entries own (:meth:`_owned`; each hit needs its ``doc_id`` in ``docvalue_fields``). Chunks no
        entry owns are excluded inside the query and the search is run again, so the top k are still the
        top k of what the principal may see, never a post-filtered remainder; after :data:`LIVE_ROUNDS`
        rounds that each found new ones (a burst of writes), the owned hits of the last round return."""
        hidden: set[int] = set()
        owned: set[int] = set()
        hits: list[dict[str, Any]] = []
        for _ in range(LIVE_ROUNDS):
            hits = self.t.search(self.chunks_alias, body(_excluding(hidden)), what)
            found = {int(h["_id"]): _doc_of(h) for h in hits}
            owned = self._owned(tenant, found)
            if len(owned) == len(found):
                return hits
            hidden |= set(found) - owned
        return [h for h in hits if int(h["_id"]) in owned]

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

    def cosine(
        self, vector: npt.NDArray[np.float32], cids: Sequence[int], principal: Principal | None = None
    ) -> dict[int, float]:
        return {cid: float(np.dot(v, vector)) for cid, v in self._vectors("vector", cids).items()}

    def stored_vectors(
        self, cids: Sequence[int], principal: Principal | None = None
    ) -> dict[int, npt.NDArray[np.float32]]:
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
        doc_of = {c: str(mine[c]["doc_id"]) for c in order}
        hidden: set[int] = set()
        for _ in range(LIVE_ROUNDS):  # chunks no entry owns are no copies (see _live_search)
            lines: list[dict[str, Any]] = []
            for c in order:
                vector = np.asarray(mine[c]["claim_vector"], dtype=np.float32)
                query = self._knn("claim_vector", vector, [*scope, *_excluding(hidden)], depth)
                lines += [
                    {"index": self.chunks_alias},
                    {"size": depth, "_source": False, "docvalue_fields": ["doc_id"], "query": query},
                ]
            results = self._msearch(lines, "copy search")
            seen = {int(h["_id"]): _doc_of(h) for hits in results for h in hits}
            owned = self._owned(principal.tenant, seen)
            doc_of |= seen
            if len(owned) == len(seen):
                break
            hidden |= set(seen) - owned
        found = [
            [(int(h["_id"]), self._cosine(float(h["_score"]))) for h in hits if int(h["_id"]) in owned]
            for hits in results
        ]
        return closest_per_document(order, found, doc_of, limit)

    def _msearch(self, lines: list[dict[str, Any]], what: str) -> list[list[dict[str, Any]]]:
        """The hits of each search of one multi-search, in order; a search that failed, timed out or
        lost shards fails the whole read (like :meth:`Transport.search`), never a partial answer."""
        return [r["hits"]["hits"] for r in self._msearch_responses(lines, what)]

    def _msearch_responses(self, lines: list[dict[str, Any]], what: str) -> list[dict[str, Any]]:
        """:meth:`_msearch`'s whole responses (totals, aggregations)."""
        with naming(self.chunks_alias, what):
            resp = self.t.call(what, lambda: self.client.msearch(body=lines), idempotent=True)
        out: list[dict[str, Any]] = []
        for r in resp["responses"]:
            if "error" in r:
                raise RampartError(
                    ErrorCode.UNAVAILABLE,
                    f"{what} on {self.chunks_alias} at {self.url} failed: {r['error']}; retry, and check "
                    "the cluster's health",
                    url=self.url,
                    index=self.chunks_alias,
                )
            complete(r, self.chunks_alias, self.url)
            out.append(r)
        return out

    def chunks(self, cids: Sequence[int], principal: Principal | None = None) -> dict[int, Chunk]:
        if not cids:
            return {}
        got = self.t.mget(self.chunks_alias, [str(c) for c in cids], ["chunk"])
        return {int(k): Chunk.model_validate(v["chunk"]) for k, v in got.items()}

    # ---- the knowledge graph's reads (GraphReads) ----------------------------------------------------
    def entity_postings(
        self,
        keys: Sequence[str],
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[int]]:
        """One search per call when ``limit`` fits a ``top_hits`` (:data:`POSTINGS_TOP_HITS`): the
        keys' terms inside the same tenant + ACL + filter scope as BM25 and k-NN, a terms aggregation
        on ``entities`` with ``include`` = the keys, and per key its first ``limit`` chunks by id. On
        5,000 chunks and 256 keys that took 59-135 ms where a multi-search of one query per key took
        308-348 (docs/benchmarks.md). A larger limit (a hub cap past 999) takes that multi-search, paging
        with ``search_after`` past ``index.max_result_window``."""
        check_postings(keys, limit)
        wanted = list(dict.fromkeys(keys))
        if not wanted:
            return {}
        scope = self._scope(principal, filters)
        hidden: set[int] = set()
        for _ in range(LIVE_ROUNDS):
            # mentions of settled documents only, as the embedded index's (a document whose new version is
            # pending or failed is out of the graph until one is indexed); the rest excluded inside the query
            got, doc_of = self._postings(wanted, [*scope, *_excluding(hidden)], limit)
            owned = self._owned(principal.tenant, doc_of, indexed=True)
            if len(owned) == len(doc_of):
                return got
            hidden |= set(doc_of) - owned
        kept = {k: [c for c in v if c in owned] for k, v in got.items()}
        return {k: v for k, v in kept.items() if v}

    def _postings(
        self, wanted: list[str], scope: list[dict[str, Any]], limit: int
    ) -> tuple[dict[str, list[int]], dict[int, str]]:
        """One round of :meth:`entity_postings`: the postings, and each posted chunk's document."""
        if limit <= POSTINGS_TOP_HITS:
            return self._aggregated_postings(wanted, scope, limit)
        got: dict[str, list[int]] = {}
        doc_of: dict[int, str] = {}
        todo = wanted
        while todo:
            more: list[str] = []
            for start in range(0, len(todo), POSTINGS_BATCH):
                part = todo[start : start + POSTINGS_BATCH]
                lines: list[dict[str, Any]] = []
                for key in part:
                    lines += [
                        {"index": self.chunks_alias},
                        self._postings_query(key, got.get(key), scope, limit),
                    ]
                for key, hits in zip(part, self._msearch(lines, "entity postings"), strict=True):
                    if hits:
                        got.setdefault(key, []).extend(int(h["_id"]) for h in hits)
                        doc_of |= {int(h["_id"]): _doc_of(h) for h in hits}
                    if len(hits) == POSTINGS_PAGE and len(got[key]) < limit:
                        more.append(key)
            todo = more
        return got, doc_of

    def _aggregated_postings(
        self, keys: list[str], scope: list[dict[str, Any]], limit: int
    ) -> tuple[dict[str, list[int]], dict[int, str]]:
        """Every key's postings from one search (a key's bucket holds all its readable mentions: the
        aggregation's ``include`` lists exactly the keys and its size is their number, so no shard
        cuts a bucket, and ``top_hits`` merges the shards' first chunks by id)."""
        body = {
            "size": 0,
            "track_total_hits": False,
            "query": {"bool": {"filter": [*scope, {"terms": {"entities": keys}}]}},
            "aggs": {
                "keys": {
                    "terms": {"field": "entities", "include": keys, "size": len(keys)},
                    "aggs": {
                        "first": {
                            "top_hits": {
                                "size": limit,
                                "_source": False,
                                "docvalue_fields": ["doc_id"],
                                "sort": [{"cid": "asc"}],
                            }
                        }
                    },
                }
            },
        }
        with naming(self.chunks_alias, "entity postings"):
            resp = self.t.call(
                "entity postings",
                lambda: self.client.search(index=self.chunks_alias, body=body),
                idempotent=True,
            )
        complete(resp, self.chunks_alias, self.url)
        buckets = resp["aggregations"]["keys"]["buckets"]
        hits = {str(b["key"]): b["first"]["hits"]["hits"] for b in buckets}
        got = {k: [int(h["_id"]) for h in v] for k, v in hits.items()}
        return got, {int(h["_id"]): _doc_of(h) for v in hits.values() for h in v}

    @staticmethod
    def _postings_query(
        key: str, before: list[int] | None, scope: list[dict[str, Any]], limit: int
    ) -> dict[str, Any]:
        """One key's next page of postings (``before``: what earlier pages returned)."""
        body: dict[str, Any] = {
            "size": min(limit - len(before or ()), POSTINGS_PAGE),
            "_source": False,
            "docvalue_fields": ["doc_id"],
            "track_total_hits": False,
            "query": {"bool": {"filter": [*scope, {"term": {"entities": key}}]}},
            "sort": [{"cid": "asc"}],
        }
        if before:
            body["search_after"] = [before[-1]]
        return body

    def chunk_entities(self, cids: Sequence[int]) -> dict[int, list[str]]:
        """The stored ``entities`` of each chunk that has some (a real-time GET, like other chunk
        reads); a chunk indexed before layout v3 has none."""
        if not cids:
            return {}
        got = self.t.mget(self.chunks_alias, [str(c) for c in cids], ["entities"])
        return {int(k): [str(e) for e in v["entities"]] for k, v in got.items() if v.get("entities")}

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


def _excluding(cids: set[int]) -> list[dict[str, Any]]:
    """A filter clause keeping ``cids`` out of a search (none when there are none)."""
    return [{"bool": {"must_not": [{"terms": {"cid": sorted(cids)}}]}}] if cids else []


def _doc_of(hit: dict[str, Any]) -> str:
    """A chunk hit's document id, read from doc values (``docvalue_fields``: no ``_source`` to load)."""
    return str(hit["fields"]["doc_id"][0])
