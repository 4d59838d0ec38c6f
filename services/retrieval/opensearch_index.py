"""The OpenSearch index: the ``SearchIndex`` of ``index.backend=opensearch`` (docs/opensearch.md).

Unlike the embedded index, any number of processes share it: the retrieval-service replicas and the
ingest workers all talk to one OpenSearch. Three indexes, each a versioned index behind an alias
(``<prefix>-chunks`` → ``<prefix>-chunks-v1``; a new layout is a new version that ``rampart index
migrate`` will build and swap the alias to):

- **chunks**: one document per chunk, ``_id`` = its chunk id. BM25 text (k1/b from ``index.bm25_*``),
  the 384-d HNSW vector and the claim vector (Lucene engine here), and keyword fields that every read
  filters on *inside* the search: tenant, ACL tokens, document id and version, source, trust.
- **documents**: one per (tenant, document): ingest status, version, content hash, the name it is found
  by (``named``), and the ids of its chunks (so an update or a delete removes exactly those).
- **meta**: the chunk-id counter (the ``SearchIndex`` speaks integer chunk ids, as the embedded index's
  SQLite assigns them).

Write order of a batch: documents marked ``pending`` with the ids their new chunks will get → new
chunks (bulk) → old chunks deleted and documents ``indexed`` (bulk). Each bulk item that fails fails
its document (with OpenSearch's reason) and the others still land. Refresh policy: ``opensearch.refresh``
on both bulks (the second one touches the chunks index only when it deletes old chunks); the default
``wait_for`` returns once the write is searchable, which is what ingest acknowledges, at the cost of
up to two refresh intervals (1 s each by default) per write.
Status reads (``status``, ``current``, chunk and vector reads) are real-time GETs, never stale.

Requests that are safe to repeat (searches, GETs, bulks of writes by id) are retried on 429, 5xx and
lost connections with exponential back-off; the one that is not (the id counter) is sent once.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
from opensearchpy import OpenSearch
from opensearchpy.exceptions import ConnectionError as ClientConnectionError
from opensearchpy.exceptions import ConnectionTimeout, NotFoundError, TransportError

from services.common.errors import ErrorCode, RampartError
from services.common.titles import mentioned_names, name_key
from services.common.types import Chunk, DocumentState, DocumentStatus, Principal, SearchFilters
from services.retrieval.capabilities import (
    COPY_SEARCH_EXTRA,
    COPY_SEARCH_FACTOR,
    MAX_NAMED_KEYS,
    CheckReads,
    Copies,
    LinkReads,
    closest_per_document,
    copy_profiles,
)
from services.retrieval.config import IndexSettings, OpenSearchSettings
from services.retrieval.doc_store import ChunkWrite, DocumentWrite
from services.retrieval.index import Hits
from services.retrieval.opensearch_node import unreachable

log = logging.getLogger(__name__)
T = TypeVar("T")

SCHEMA_VERSION = 1  # the layout below; a change means a new version and `rampart index migrate`
MIGRATE_HINT = (
    "`rampart index migrate` (issue 35; not written yet: until then re-ingest into a new index_prefix)"
)
ANALYZER = "rampart_en"
BULK_ACTIONS = 500  # items per bulk request (a chunk with two 384-d vectors is ~8 KB of JSON)
MGET_BATCH = 1000


def _analysis() -> dict[str, Any]:
    """The embedded index's analysis (services/retrieval/bm25_index.py) in Lucene's terms: split on
    non-alphanumerics, drop tokens of 40+ characters, lowercase, English stop words, Snowball stem."""
    return {
        "tokenizer": {"rampart_words": {"type": "pattern", "pattern": "[^\\p{L}\\p{N}]+"}},
        "filter": {
            "rampart_short": {"type": "length", "max": 39},
            "rampart_stop": {"type": "stop", "stopwords": "_english_"},
            "rampart_stem": {"type": "snowball", "language": "English"},
        },
        "analyzer": {
            ANALYZER: {
                "type": "custom",
                "tokenizer": "rampart_words",
                "filter": ["rampart_short", "lowercase", "rampart_stop", "rampart_stem"],
            }
        },
    }


def _stored(kind: str) -> dict[str, Any]:
    """A field kept in ``_source`` only (read back, never searched)."""
    return {"type": kind, "index": False, "doc_values": False}


class OpenSearchIndex(CheckReads, LinkReads):
    """A ``SearchIndex`` on an OpenSearch cluster (see the module doc for its layout and writes)."""

    def __init__(
        self, client: OpenSearch, url: str, dim: int, settings: OpenSearchSettings, index: IndexSettings
    ) -> None:
        self.client = client
        self.url = url
        self.dim = dim
        self._s = settings
        self._index = index
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
        url = settings.endpoint()
        auth = (
            (settings.username, settings.password.get_secret_value() if settings.password else "")
            if settings.username
            else None
        )
        client = OpenSearch(
            hosts=[url],
            http_auth=auth,
            use_ssl=url.startswith("https://"),
            verify_certs=settings.verify_certs,
            ca_certs=str(settings.ca_certs) if settings.ca_certs else None,
            timeout=settings.timeout_s,
            max_retries=0,  # retried here, for idempotent requests only (_call)
            retry_on_timeout=False,
            http_compress=True,
        )
        ix = cls(client, url, dim, settings, index or IndexSettings())
        try:
            ix._call("connect", client.info, idempotent=True)
            ix._ensure_layout(model_id)
        except BaseException:
            client.close()
            raise
        return ix

    def _ensure_layout(self, model_id: str | None) -> None:
        bodies = {
            self.chunks_alias: self._chunks_body(),
            self.documents_alias: self._documents_body(),
            self.meta_alias: self._meta_body(),
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
        if not self._call(
            "find alias", lambda: self.client.indices.exists_alias(name=alias), idempotent=True
        ):
            return None
        found = self._call("get alias", lambda: self.client.indices.get_alias(name=alias), idempotent=True)
        names = sorted(found)
        if len(names) != 1:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"the alias {alias} at {self.url} points at {len(names)} indexes ({', '.join(names)}); "
                f"it must name one; fix it with {MIGRATE_HINT}",
                alias=alias,
            )
        return str(names[0])

    def _create(self, name: str, body: dict[str, Any]) -> None:
        try:
            self._call(
                "create index", lambda: self.client.indices.create(index=name, body=body), idempotent=False
            )
        except RampartError as exc:
            if "resource_already_exists_exception" not in exc.message:  # another process won the race
                raise

    def _mapping_meta(self, concrete: str) -> dict[str, Any]:
        got = self._call(
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
            self._call(
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

    def _settings_body(self, **extra: Any) -> dict[str, Any]:
        return {
            "index": {"number_of_shards": self._s.shards, "number_of_replicas": self._s.replicas, **extra}
        }

    def _vector(self) -> dict[str, Any]:
        return {
            "type": "knn_vector",
            "dimension": self.dim,
            "method": {
                "name": "hnsw",
                "engine": self._s.knn_engine,
                "space_type": self._s.knn_space,
                "parameters": {"m": self._s.knn_m, "ef_construction": self._s.knn_ef_construction},
            },
        }

    def _chunks_body(self) -> dict[str, Any]:
        keyword = {"type": "keyword"}
        return {
            "settings": {
                **self._settings_body(
                    knn=True,
                    similarity={
                        "default": {"type": "BM25", "k1": self._index.bm25_k1, "b": self._index.bm25_b}
                    },
                ),
                "analysis": _analysis(),
            },
            "mappings": {
                "dynamic": "strict",
                "properties": {
                    "cid": {"type": "long"},
                    "tenant": keyword,
                    "doc_id": keyword,
                    "ordinal": {"type": "integer"},
                    "version": {"type": "long"},
                    "acl": keyword,
                    "source": keyword,
                    "trust": keyword,
                    "meta": keyword,  # "key\x1f<json value>": exact-match metadata filters
                    "text": {"type": "text", "analyzer": ANALYZER},
                    "token_len": _stored("integer"),
                    "chunk": {"type": "object", "enabled": False},
                    "vector": self._vector(),
                    "claim_vector": self._vector(),
                },
            },
        }

    def _documents_body(self) -> dict[str, Any]:
        keyword = {"type": "keyword"}
        return {
            "settings": self._settings_body(),
            "mappings": {
                "dynamic": "strict",
                "properties": {
                    "tenant": keyword,
                    "doc_id": keyword,
                    "state": keyword,
                    "version": {"type": "long"},
                    "content_hash": _stored("keyword"),
                    "title": _stored("keyword"),
                    "name": keyword,
                    "source": keyword,
                    "acl": keyword,
                    "metadata": {"type": "object", "enabled": False},
                    "chunks": {"type": "integer"},
                    "cids": _stored("long"),
                    "pending_cids": _stored("long"),
                    "first_cid": {"type": "long"},
                    "error": {"type": "text", "index": False},
                    "updated_at": {"type": "double"},
                },
            },
        }

    def _meta_body(self) -> dict[str, Any]:
        return {
            "settings": self._settings_body(),
            "mappings": {"dynamic": "strict", "properties": {"next": {"type": "long"}}},
        }

    def close(self) -> None:
        self.client.close()

    # ---- transport ----------------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[[], T], *, idempotent: bool) -> T:
        """``fn()``, retried with back-off on 429, 5xx and lost connections when ``idempotent``;
        OpenSearch's errors become ``RampartError`` naming the node and the fix."""
        attempts = 1 + (self._s.retries if idempotent else 0)
        delay = self._s.backoff_s
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                return fn()
            except ConnectionTimeout as exc:
                if last:
                    raise RampartError(
                        ErrorCode.DEADLINE_EXCEEDED,
                        f"OpenSearch at {self.url} did not answer {what} within {self._s.timeout_s} s "
                        "(RAMPART_OPENSEARCH__TIMEOUT_S)",
                        url=self.url,
                    ) from exc
            except ClientConnectionError as exc:
                if last:
                    raise unreachable(self.url, exc) from exc
            except NotFoundError as exc:
                raise RampartError(
                    ErrorCode.NOT_FOUND, f"{what}: not found at {self.url}: {_reason(exc)}", url=self.url
                ) from exc
            except TransportError as exc:
                status = exc.status_code if isinstance(exc.status_code, int) else 0
                transient = status == 429 or status >= 500
                if last or not transient:
                    code = ErrorCode.UNAVAILABLE if transient else ErrorCode.INTERNAL
                    raise RampartError(
                        code,
                        f"OpenSearch at {self.url} refused {what} (HTTP {status}): {_reason(exc)}",
                        url=self.url,
                        status=status,
                    ) from exc
            time.sleep(delay * (1.0 + 0.2 * random.random()))  # jitter, not crypto
            delay *= 2
        raise AssertionError("unreachable")  # pragma: no cover

    def _search(self, alias: str, body: dict[str, Any], what: str) -> list[dict[str, Any]]:
        """The hits of one search; partial results (failed shards, a timeout) are an error, never
        returned as if complete."""
        resp = self._call(what, lambda: self.client.search(index=alias, body=body), idempotent=True)
        _complete(resp, alias, self.url)
        hits: list[dict[str, Any]] = resp["hits"]["hits"]
        return hits

    def _bulk(self, lines: list[dict[str, Any]], what: str, refresh: bool) -> list[dict[str, Any]]:
        """Run bulk ``lines`` (action, source, …) in requests of ``BULK_ACTIONS``; return one result
        item per action."""
        items: list[dict[str, Any]] = []
        actions = _split_actions(lines)
        for start in range(0, len(actions), BULK_ACTIONS):
            part = [line for action in actions[start : start + BULK_ACTIONS] for line in action]
            # every request of a refreshing bulk waits: with several shards, the last request need
            # not touch the shards the earlier ones wrote to
            policy = self._s.refresh if refresh else "false"
            resp = self._call(
                what,
                functools.partial(self.client.bulk, body=part, refresh=policy),
                idempotent=True,
            )
            items += [next(iter(item.values())) for item in resp["items"]]
        return items

    def _mget(self, alias: str, ids: Sequence[str], fields: Sequence[str]) -> dict[str, dict[str, Any]]:
        """``_source`` (only ``fields``) of the documents that exist among ``ids`` (real-time)."""
        out: dict[str, dict[str, Any]] = {}
        for start in range(0, len(ids), MGET_BATCH):
            part = list(ids[start : start + MGET_BATCH])
            resp = self._call(
                "read",
                functools.partial(
                    self.client.mget,
                    index=alias,
                    body={"ids": part},
                    params={"_source_includes": ",".join(fields)},
                ),
                idempotent=True,
            )
            for d in resp["docs"]:
                if d.get("found"):
                    out[d["_id"]] = d.get("_source", {})
                elif "error" in d:
                    raise RampartError(
                        ErrorCode.UNAVAILABLE,
                        f"reading {alias} at {self.url} failed: {d['error']}",
                        url=self.url,
                    )
        return out

    def _get_document(self, tenant: str, doc_id: str) -> dict[str, Any] | None:
        return self._mget(self.documents_alias, [_doc_key(tenant, doc_id)], ["*"]).get(
            _doc_key(tenant, doc_id)
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
        resp = self._call(
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
        if not docs:
            return
        latest = {(d.tenant, d.doc_id): d for d in docs}  # a document twice in a batch: the last wins
        batch = list(latest.values())
        old = self._mget(self.documents_alias, [_doc_key(d.tenant, d.doc_id) for d in batch], ["cids"])
        cids = iter(self._allocate(sum(len(d.chunks) for d in batch)))
        new = {(d.tenant, d.doc_id): [next(cids) for _ in d.chunks] for d in batch}
        self._mark_pending(batch, new)
        failed = self._write_chunks(batch, new)
        lines: list[dict[str, Any]] = []
        for d in batch:
            who = (d.tenant, d.doc_id)
            if who in failed:
                lines += self._undo_lines(d, new[who], failed[who])
            else:
                stale = [c for c in old.get(_doc_key(*who), {}).get("cids", []) if c not in set(new[who])]
                lines += [{"delete": {"_index": self.chunks_alias, "_id": str(c)}} for c in stale]
                lines += [
                    {"index": {"_index": self.documents_alias, "_id": _doc_key(*who)}},
                    _indexed(d, new[who]),
                ]
        self._raise_failed(
            self._bulk(lines, "finish documents", refresh=True), batch, "finish", deletes_ok=True
        )
        if failed:
            names = ", ".join(f"{t}/{d}: {r}" for (t, d), r in sorted(failed.items()))
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"OpenSearch at {self.url} refused {len(failed)} of {len(batch)} documents ({names}); they are "
                "marked failed, the rest are indexed; send the failed ones again",
                failed=[f"{t}/{d}" for t, d in sorted(failed)],
            )

    def _mark_pending(self, batch: Sequence[DocumentWrite], new: dict[tuple[str, str], list[int]]) -> None:
        """Step 1: each document ``pending``, with the ids its new chunks get (what a repair would
        remove after a crash between the steps)."""
        now = time.time()
        lines: list[dict[str, Any]] = []
        for d in batch:
            fields = {
                "tenant": d.tenant,
                "doc_id": d.doc_id,
                "version": d.version,
                "state": DocumentState.PENDING.value,
                "pending_cids": new[(d.tenant, d.doc_id)],
                "updated_at": now,
            }
            lines += [
                {"update": {"_index": self.documents_alias, "_id": _doc_key(d.tenant, d.doc_id)}},
                {"doc": fields, "doc_as_upsert": True},
            ]
        self._raise_failed(self._bulk(lines, "mark documents pending", refresh=False), batch, "mark pending")

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
                    _chunk_source(d, cid, cw),
                ]
                owner.append((d.tenant, d.doc_id))
        failed: dict[tuple[str, str], str] = {}
        for who, item in zip(owner, self._bulk(lines, "write chunks", refresh=True), strict=True):
            if "error" in item and who not in failed:
                failed[who] = _item_reason(item)
        return failed

    def _undo_lines(self, d: DocumentWrite, cids: list[int], reason: str) -> list[dict[str, Any]]:
        """A refused document: its new chunks go, its old ones stay searchable, it is marked failed."""
        lines: list[dict[str, Any]] = [{"delete": {"_index": self.chunks_alias, "_id": str(c)}} for c in cids]
        error = f"OpenSearch refused a chunk of version {d.version}: {reason}"
        return [
            *lines,
            {"update": {"_index": self.documents_alias, "_id": _doc_key(d.tenant, d.doc_id)}},
            {"doc": {"state": DocumentState.FAILED.value, "error": error, "pending_cids": []}},
        ]

    def _raise_failed(
        self, items: list[dict[str, Any]], batch: Sequence[DocumentWrite], step: str, deletes_ok: bool = False
    ) -> None:
        bad = [_item_reason(i) for i in items if "error" in i and not (deletes_ok and i.get("status") == 404)]
        if bad:
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"OpenSearch at {self.url} failed to {step} for {len(bad)} items of a batch of {len(batch)} "
                f"documents (first: {bad[0]}); send the batch again",
                url=self.url,
            )

    def delete(self, tenant: str, doc_id: str) -> bool:
        current = self._get_document(tenant, doc_id)
        if current is None or current.get("state") == DocumentState.DELETED.value:
            return False
        key = _doc_key(tenant, doc_id)
        lines: list[dict[str, Any]] = [
            {"delete": {"_index": self.chunks_alias, "_id": str(c)}} for c in current.get("cids", [])
        ]
        lines += [
            {"update": {"_index": self.documents_alias, "_id": key}},
            {
                "doc": {
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
        items = self._bulk(lines, "delete a document", refresh=True)
        bad = [_item_reason(i) for i in items if "error" in i and i.get("status") != 404]
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
        refresh interval per document; ``named`` sees the new state within one interval."""
        fields = {
            "tenant": tenant,
            "doc_id": doc_id,
            "version": version,
            "state": state.value,
            "error": error,
            "updated_at": time.time(),
        }
        body = {"doc": fields, "doc_as_upsert": True}
        self._call(
            "mark a document",
            lambda: self.client.update(
                index=self.documents_alias,
                id=_doc_key(tenant, doc_id),
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
        )

    def current(self, tenant: str, doc_id: str) -> tuple[int, str, DocumentState] | None:
        d = self._get_document(tenant, doc_id)
        if d is None:
            return None
        return int(d["version"]), str(d.get("content_hash") or ""), DocumentState(d["state"])

    def token_length(self, text: str) -> int:
        return self.token_lengths([text])[0]

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """One ``_analyze`` call for all texts. Its tokens carry offsets into the texts laid end to end
        (Java string lengths, one apart), which assign each token to its text."""
        if not texts:
            return []
        body = {"analyzer": ANALYZER, "text": list(texts)}
        resp = self._call(
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
            (int(h["_id"]), float(h["_score"])) for h in self._search(self.chunks_alias, body, "bm25 search")
        ]

    def _knn(
        self, field: str, vector: npt.NDArray[np.float32], scope: list[dict[str, Any]], k: int
    ) -> dict[str, Any]:
        """A k-NN query whose filter runs inside the HNSW search (Lucene's filtered search), so the
        top ``k`` are the top ``k`` the principal may read, not a post-filtered remainder."""
        return {
            "knn": {
                field: {
                    "vector": _floats(vector),
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
        hits = self._search(self.chunks_alias, body, "dense search")
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
            for h in self._search(self.documents_alias, body, "named lookup")
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
        return {int(h["_id"]) for h in self._search(self.chunks_alias, body, "ACL check")}

    def _vectors(self, field: str, cids: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        got = self._mget(self.chunks_alias, [str(c) for c in cids], [field])
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
        leads: float = 0.0,
    ) -> dict[int, Copies]:
        return copy_profiles(
            cids,
            limit,
            expand=expand,
            leads=leads,
            closest=lambda some, n: self._closest(some, principal, n),
            chunks=self.chunks,
        )

    def _closest(
        self, cids: list[int], principal: Principal, limit: int
    ) -> dict[int, list[tuple[int, float]]]:
        """Per chunk with a claim vector: (chunk, cosine) of the closest chunk of each other readable
        document; one multi-search of filtered k-NN queries on the claim vectors."""
        if not cids:
            return {}
        got = self._mget(self.chunks_alias, [str(c) for c in cids], ["claim_vector", "doc_id"])
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
        resp = self._call("copy search", lambda: self.client.msearch(body=lines), idempotent=True)
        doc_of = {c: str(mine[c]["doc_id"]) for c in order}
        found: list[list[tuple[int, float]]] = []
        for r in resp["responses"]:
            if "error" in r:
                raise RampartError(
                    ErrorCode.UNAVAILABLE,
                    f"copy search on {self.chunks_alias} at {self.url} failed: {r['error']}",
                    url=self.url,
                )
            _complete(r, self.chunks_alias, self.url)
            hits = r["hits"]["hits"]
            for h in hits:
                doc_of[int(h["_id"])] = str(h["_source"]["doc_id"])
            found.append([(int(h["_id"]), self._cosine(float(h["_score"]))) for h in hits])
        return closest_per_document(order, found, doc_of, limit)

    def chunks(self, cids: Sequence[int]) -> dict[int, Chunk]:
        if not cids:
            return {}
        got = self._mget(self.chunks_alias, [str(c) for c in cids], ["chunk"])
        return {int(k): Chunk.model_validate(v["chunk"]) for k, v in got.items()}

    def stats(self) -> dict[str, int]:
        count = self._call(
            "count chunks", lambda: self.client.count(index=self.chunks_alias), idempotent=True
        )
        body = {"size": 0, "aggs": {"states": {"terms": {"field": "state", "size": 10}}}}
        resp = self._call(
            "count documents",
            lambda: self.client.search(index=self.documents_alias, body=body),
            idempotent=True,
        )
        _complete(resp, self.documents_alias, self.url)
        states = {b["key"]: int(b["doc_count"]) for b in resp["aggregations"]["states"]["buckets"]}
        return {"chunks": int(count["count"]), **{f"documents_{k}": v for k, v in states.items()}}


# ---- helpers ------------------------------------------------------------------------------------------
def _doc_key(tenant: str, doc_id: str) -> str:
    """The documents index's ``_id``: unambiguous for any tenant and document id."""
    return f"{len(tenant)}:{tenant}:{doc_id}"


def _floats(v: npt.NDArray[np.float32]) -> list[float]:
    return [float(x) for x in np.asarray(v, dtype=np.float32).tolist()]


def _first_cid(cids: Sequence[int], d: DocumentWrite) -> int | None:
    """The id of the document's first chunk (lowest ordinal): what ``named`` returns for it."""
    if not cids:
        return None
    return min(zip((cw.chunk.ordinal for cw in d.chunks), cids, strict=True))[1]


def _chunk_source(d: DocumentWrite, cid: int, cw: ChunkWrite) -> dict[str, Any]:
    src: dict[str, Any] = {
        "cid": cid,
        "tenant": d.tenant,
        "doc_id": d.doc_id,
        "ordinal": cw.chunk.ordinal,
        "version": d.version,
        "acl": d.acl.tokens(),
        "source": d.source,
        "trust": cw.chunk.trust,
        "meta": [f"{k}\x1f{json.dumps(v)}" for k, v in d.metadata.items()],
        "text": cw.chunk.indexed_text,
        "token_len": cw.token_len,
        "chunk": cw.chunk.model_dump(mode="json"),
        "vector": _floats(cw.vector),
    }
    if cw.claim_vector is not None:
        src["claim_vector"] = _floats(cw.claim_vector)
    return src


def _indexed(d: DocumentWrite, cids: list[int]) -> dict[str, Any]:
    """The documents-index entry of a document whose chunks all landed."""
    return {
        "tenant": d.tenant,
        "doc_id": d.doc_id,
        "version": d.version,
        "state": DocumentState.INDEXED.value,
        "content_hash": d.content_hash,
        "title": d.title,
        "name": name_key(d.title) if d.chunks else None,
        "source": d.source,
        "acl": d.acl.tokens(),
        "metadata": d.metadata,
        "chunks": len(d.chunks),
        "cids": cids,
        "pending_cids": [],
        "first_cid": _first_cid(cids, d),
        "error": None,
        "updated_at": time.time(),
    }


def _split_actions(lines: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Bulk lines grouped per action (a delete has no source line; index and update have one)."""
    out: list[list[dict[str, Any]]] = []
    i = 0
    while i < len(lines):
        action = lines[i]
        if "delete" in action:
            out.append([action])
            i += 1
        else:
            out.append([action, lines[i + 1]])
            i += 2
    return out


def _item_reason(item: dict[str, Any]) -> str:
    """A bulk item's error with its cause (where OpenSearch says what was wrong with the value)."""
    err = item.get("error")
    if not isinstance(err, dict):
        return str(err)
    reason = f"{err.get('type', 'error')}: {err.get('reason', '')}"
    cause = err.get("caused_by")
    if isinstance(cause, dict) and cause.get("reason"):
        reason += f" (caused by {cause.get('type', '')}: {cause['reason']})"
    return reason


def _reason(exc: TransportError) -> str:
    info = exc.info if isinstance(exc.info, dict) else {}
    err = info.get("error")
    if isinstance(err, dict):
        return f"{err.get('type', '')}: {err.get('reason', '')}"
    return str(exc.error)


def _complete(resp: dict[str, Any], alias: str, url: str) -> None:
    """Refuse partial results: a search that timed out or lost shards is an error naming the index."""
    shards = resp.get("_shards", {})
    if resp.get("timed_out") or shards.get("failed", 0):
        raise RampartError(
            ErrorCode.UNAVAILABLE,
            f"search on {alias} at {url} returned partial results ({shards.get('failed', 0)} of "
            f"{shards.get('total', '?')} shards failed, timed out: {bool(resp.get('timed_out'))}); retry, "
            "and check the cluster's health",
            index=alias,
        )
