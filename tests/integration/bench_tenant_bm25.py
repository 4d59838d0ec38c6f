"""What per-tenant BM25 and the recorded-version check cost on OpenSearch (docs/opensearch.md, "BM25
per tenant" and "What a search sees"): two tenants of 3,000 chunks each on a throw-away node started
here, like the tests'; BM25 and k-NN as ``OpenSearchIndex`` runs them now against the plain queries it
ran before (Lucene's BM25 with the shard's statistics; k-NN without reading the hits' entries). Not a
test (not collected):

    PYTHONPATH=$PWD:$PWD/proto/gen .venv/bin/python -m tests.integration.bench_tenant_bm25
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from services.common.net import free_port
from services.common.types import Principal
from services.retrieval.config import OpenSearchSettings
from services.retrieval.doc_store import DocumentWrite
from services.retrieval.opensearch_index import OpenSearchIndex
from services.retrieval.opensearch_node import OpenSearchNode, build
from tests.contracts.search_index import DIM, doc, vec

CHUNKS, WORDS, VOCABULARY, QUERIES, LIMIT = 3_000, 60, 5_000, 100, 100
WHO = Principal(tenant="t1", user="u", groups=["*"])


def corpus(rng: random.Random, tenant: str) -> list[DocumentWrite]:
    """One-chunk documents of WORDS words drawn Zipf-like from one vocabulary (shared by the tenants)."""
    weights = [1.0 / (i + 1) for i in range(VOCABULARY)]
    return [
        doc(
            f"{tenant}-{i}",
            [" ".join(f"w{j}" for j in rng.choices(range(VOCABULARY), weights, k=WORDS))],
            tenant=tenant,
        )
        for i in range(CHUNKS)
    ]


def percentiles(run: Callable[[str], object], queries: list[str]) -> tuple[float, float]:
    """(p50, p95) in ms of ``run`` over ``queries`` (one warm-up each first)."""
    for q in queries[:10]:
        run(q)
    times = []
    for q in queries:
        begin = time.perf_counter()
        run(q)
        times.append((time.perf_counter() - begin) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95) - 1]


def plain_bm25(ix: OpenSearchIndex, query: str) -> Any:
    """The BM25 search before per-tenant statistics and the recorded-version check."""
    scope = OpenSearchIndex._scope(WHO, None)
    body = {
        "size": LIMIT,
        "_source": False,
        "track_total_hits": False,
        "query": {"bool": {"must": [{"match": {"text": query}}], "filter": scope}},
        "sort": [{"_score": "desc"}, {"cid": "asc"}],
        "track_scores": True,
    }
    return ix.t.search(ix.chunks_alias, body, "bm25 search")


def plain_dense(ix: OpenSearchIndex, query: str) -> Any:
    body = {
        "size": LIMIT,
        "_source": False,
        "track_total_hits": False,
        "query": ix._knn("vector", vec(query), OpenSearchIndex._scope(WHO, None), LIMIT),
    }
    return ix.t.search(ix.chunks_alias, body, "dense search")


def main() -> None:
    rng = random.Random(7)
    docs = corpus(rng, "t1") + corpus(rng, "t2")
    weights = [1.0 / (i + 1) for i in range(VOCABULARY)]
    queries = [
        " ".join(f"w{j}" for j in rng.choices(range(VOCABULARY), weights, k=rng.randint(3, 8)))
        for _ in range(QUERIES)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        build()
        node = OpenSearchNode(Path(tmp) / "node", free_port(), heap_mb=512)
        node.start()
        try:
            ix = OpenSearchIndex.open(OpenSearchSettings(url=node.url, index_prefix="bench"), dim=DIM)
            for start in range(0, len(docs), 500):
                ix.write(docs[start : start + 500])
            rows = {
                "bm25 before (Lucene, shard statistics)": lambda q: plain_bm25(ix, q),
                "bm25 now (per tenant, recorded versions)": lambda q: ix.bm25(q, WHO, LIMIT),
                "dense before": lambda q: plain_dense(ix, q),
                "dense now (recorded versions)": lambda q: ix.dense(vec(q), WHO, LIMIT),
            }
            for name, run in rows.items():
                p50, p95 = percentiles(run, queries)
                print(f"{name}: p50 {p50:.1f} ms, p95 {p95:.1f} ms")
            ix.close()
        finally:
            node.stop()


if __name__ == "__main__":
    main()
