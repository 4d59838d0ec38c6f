"""The OpenSearch index's layout: its three indexes' settings and mappings, and the shape of what it
stores in them (docs/opensearch.md, section "The index").

:data:`SCHEMA_VERSION` is recorded in each mapping's ``_meta``: any change here that an existing
index cannot take (a field's type, the analyser, the vector method) bumps it, and an index of another
version is refused with a pointer to ``rampart index migrate``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from services.common.titles import name_key
from services.common.types import DocumentState
from services.retrieval.config import IndexSettings, OpenSearchSettings
from services.retrieval.doc_store import ChunkWrite, DocumentWrite

# the layout below; a change means a new version and `rampart index migrate`. 2: the crash-repair
# fields of the documents index (writer, lease_until, stale_cids; pending_cids searchable). 3: the
# chunks' entity keys (`entities`, the knowledge graph's mentions; a migrated chunk has none). 4: the
# chunks' `token_len` with doc values (BM25 with per-tenant statistics: its average length per tenant
# is a sum over them, and the BM25 script reads each chunk's length)
SCHEMA_VERSION = 4
ANALYZER = "rampart_en"
# hits per entity in one aggregation of entity postings (the chunks index's
# index.max_inner_result_window, 100 by default: under the graph's default hub cap of 201)
POSTINGS_TOP_HITS = 1_000


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


def _settings_body(settings: OpenSearchSettings, **extra: Any) -> dict[str, Any]:
    return {"index": {"number_of_shards": settings.shards, "number_of_replicas": settings.replicas, **extra}}


def _vector(settings: OpenSearchSettings, dim: int) -> dict[str, Any]:
    return {
        "type": "knn_vector",
        "dimension": dim,
        "method": {
            "name": "hnsw",
            "engine": settings.knn_engine,
            "space_type": settings.knn_space,
            "parameters": {"m": settings.knn_m, "ef_construction": settings.knn_ef_construction},
        },
    }


def chunks_body(settings: OpenSearchSettings, index: IndexSettings, dim: int) -> dict[str, Any]:
    """The chunks index: what every search reads and filters on."""
    keyword = {"type": "keyword"}
    return {
        "settings": {
            **_settings_body(
                settings,
                knn=True,
                max_inner_result_window=POSTINGS_TOP_HITS,
                similarity={"default": {"type": "BM25", "k1": index.bm25_k1, "b": index.bm25_b}},
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
                # the chunk's entity keys (graph.entities.entity_key): its mentions, the graph's edges;
                # doc values: postings are a terms aggregation on it
                "entities": keyword,
                "text": {"type": "text", "analyzer": ANALYZER},
                "token_len": {"type": "integer", "index": False},  # doc values: per-tenant BM25
                "chunk": {"type": "object", "enabled": False},
                "vector": _vector(settings, dim),
                "claim_vector": _vector(settings, dim),
            },
        },
    }


def documents_body(settings: OpenSearchSettings) -> dict[str, Any]:
    """The documents index: ingest status, names, and which chunks a document owns."""
    keyword = {"type": "keyword"}
    return {
        "settings": _settings_body(settings),
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
                # a write in progress (services/retrieval/opensearch_repair.py): searchable, so that a
                # repair finds what a crash left
                "pending_cids": {"type": "long"},
                "stale_cids": {"type": "long"},
                "writer": keyword,
                "lease_until": {"type": "double"},
                "first_cid": {"type": "long"},
                "error": {"type": "text", "index": False},
                "updated_at": {"type": "double"},
            },
        },
    }


def meta_body(settings: OpenSearchSettings) -> dict[str, Any]:
    """The meta index: the chunk-id counter."""
    return {
        "settings": _settings_body(settings),
        "mappings": {"dynamic": "strict", "properties": {"next": {"type": "long"}}},
    }


def doc_key(tenant: str, doc_id: str) -> str:
    """The documents index's ``_id``: unambiguous for any tenant and document id."""
    return f"{len(tenant)}:{tenant}:{doc_id}"


def floats(v: npt.NDArray[np.float32]) -> list[float]:
    return [float(x) for x in np.asarray(v, dtype=np.float32).tolist()]


def _first_cid(cids: Sequence[int], d: DocumentWrite) -> int | None:
    """The id of the document's first chunk (lowest ordinal): what ``named`` returns for it."""
    if not cids:
        return None
    return min(zip((cw.chunk.ordinal for cw in d.chunks), cids, strict=True))[1]


def chunk_source(d: DocumentWrite, cid: int, cw: ChunkWrite) -> dict[str, Any]:
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
        "entities": list(dict.fromkeys(cw.entities)),  # a key once per chunk, as the embedded mentions
        "text": cw.chunk.indexed_text,
        "token_len": cw.token_len,
        "chunk": cw.chunk.model_dump(mode="json"),
        "vector": floats(cw.vector),
    }
    if cw.claim_vector is not None:
        src["claim_vector"] = floats(cw.claim_vector)
    return src


def indexed_source(d: DocumentWrite, cids: list[int]) -> dict[str, Any]:
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
        "stale_cids": [],
        "writer": None,
        "lease_until": None,
        "first_cid": _first_cid(cids, d),
        "error": None,
        "updated_at": time.time(),
    }
