"""No leak through scores (issue 36, point 5): a tenant cannot tell from anything a search or an
answer returns whether another tenant wrote a rare word.

The attack: tenant A plants documents with a made-up word and searches for it. If BM25's statistics
(how many chunks hold the word, how many chunks there are, their average length) counted every
tenant's chunks, tenant B writing the word would lower its IDF and move A's scores, and a two-word
query would reorder A's results. The test runs A's searches and an answer before and after B ingests
documents full of that word, on one index shared by both tenants — the embedded index, and a real
OpenSearch node (one shard holds both tenants) — and compares the whole responses but the request ids
and timings. It first checks that B's documents did move the engine's own index-wide BM25 (tantivy's,
Lucene's), so the channel it closes was really open on that backend.

B already holds a document when A first looks: the question is whether B wrote the word, not
whether a second tenant exists (the first other tenant switches the index from tantivy's own scores
to the per-tenant rescoring, which differs in the ninth digit; docs/security.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.common.settings import RampartSettings
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.app import create_app
from services.orchestrator.runtime import Runtime
from services.rerank.reranker import Reranker
from services.retrieval.embedded_index import EmbeddedIndex
from services.retrieval.embedder import Embedder
from services.retrieval.opensearch_index import OpenSearchIndex
from tests.integration.test_opensearch_index import runtime_on

RARE = "zorblax"
A_DOCS = [
    {
        "id": "valve-guide",
        "title": "Valve guide",
        "acl": {"groups": ["*"]},
        "text": f"Inspect the {RARE} valve monthly. The valve manual lists torque values for each fitting.",
    },
    {
        "id": "pump-notes",
        "title": "Pump notes",
        "acl": {"groups": ["*"]},
        "text": f"The pump uses a {RARE} seal. Replace the seal when the pump housing shows wear, "
        "and log the replacement in the maintenance book with the date and the technician's name.",
    },
    {
        "id": "valve-faq",
        "title": "Valve FAQ",
        "acl": {"groups": ["*"]},
        "text": "Valve questions: which valve fits the cooling loop, and how often to check it.",
    },
    {
        "id": "safety",
        "title": "Safety",
        "acl": {"groups": ["*"]},
        "text": f"Wear gloves near the {RARE} {RARE} assembly; the valve gets hot during the cycle.",
    },
]
B_DOCS = [
    {
        "id": f"b{i}",
        "title": f"Globex memo {i}",
        "acl": {"groups": ["*"]},
        "text": f"{RARE} " * (3 + i) + "Globex quarterly figures and the travel policy. " * (1 + i),
    }
    for i in range(6)
]
QUERIES = [RARE, f"{RARE} valve", f"how often to inspect the {RARE} valve and pump seal"]
VOLATILE = {"request_id", "trace_id", "timings_ms"}


@pytest.fixture(params=["embedded", "opensearch"])
def shared(
    request: pytest.FixtureRequest, settings: RampartSettings, embedder: Embedder, reranker: Reranker
) -> Iterator[Runtime]:
    """A runtime on each backend (the OpenSearch node starts only when asked for)."""
    with runtime_on(request, settings, "p", embedder=embedder, reranker=reranker) as rt:
        yield rt


def native(index: Any) -> tuple[int, list[tuple[int, float]]]:
    """The engine's own index-wide view of the rare word: how many chunks hold it (every tenant's),
    and A's chunks ranked by the engine's own BM25 (tantivy's, or Lucene's plain ``match``), which
    counts every tenant's chunks: what the per-tenant scoring replaces."""
    if isinstance(index, EmbeddedIndex):
        bm25 = index.bm25_index
        [term] = bm25.analyze(RARE)
        return bm25.doc_freqs([term])[term], bm25.search(RARE, tenant="acme", acl_tokens=["g:*"], limit=10)
    assert isinstance(index, OpenSearchIndex)
    index.client.indices.refresh(index=index.chunks_alias)
    every = index.client.count(index=index.chunks_alias, body={"query": {"match": {"text": RARE}}})
    body = {
        "size": 10,
        "query": {"bool": {"must": {"match": {"text": RARE}}, "filter": {"term": {"tenant": "acme"}}}},
    }
    hits = index.client.search(index=index.chunks_alias, body=body)["hits"]["hits"]
    return int(every["count"]), [(int(h["_id"]), float(h["_score"])) for h in hits]


def without_volatile(body: Any) -> Any:
    """The response without what differs between any two calls (ids, timings)."""
    if isinstance(body, dict):
        return {k: without_volatile(v) for k, v in body.items() if k not in VOLATILE}
    if isinstance(body, list):
        return [without_volatile(v) for v in body]
    return body


def test_a_tenant_cannot_detect_another_tenants_rare_term(shared: Runtime, tmp_path: Path) -> None:
    keys = ApiKeyStore(tmp_path / "k.json")
    a, _ = keys.create(Principal(tenant="acme", user="mallory", scopes=["search", "ingest"]))
    b, _ = keys.create(Principal(tenant="globex", user="erin", scopes=["ingest"]))
    with TestClient(create_app(shared, keys)) as client:

        def observe() -> list[Any]:
            seen = []
            for q in QUERIES:
                for extra in ({}, {"fusion": {"method": "zscore"}, "rerank": {"enabled": False}}):
                    r = client.post(
                        "/v1/search",
                        json={"query": q, "top_k": 10, **extra},
                        headers={"Authorization": f"Bearer {a}"},
                    )
                    assert r.status_code == 200, r.text
                    seen.append(without_volatile(r.json()))
            r = client.post(
                "/v1/answer",
                json={"query": f"How often is the {RARE} valve inspected?"},
                headers={"Authorization": f"Bearer {a}"},
            )
            assert r.status_code == 200, r.text
            seen.append(without_volatile({k: v for k, v in r.json().items() if k != "adaptive"}))
            return seen

        unrelated = {**B_DOCS[0], "id": "hello", "text": "Globex welcomes its new staff."}
        ok = client.post(
            "/v1/documents", json={"documents": [unrelated]}, headers={"Authorization": f"Bearer {b}"}
        )
        assert ok.status_code == 200
        ok = client.post(
            "/v1/documents", json={"documents": A_DOCS}, headers={"Authorization": f"Bearer {a}"}
        )
        assert ok.status_code == 200 and ok.json()["indexed"] == len(A_DOCS)
        df_before, engine_before = native(shared.index)
        before = observe()
        assert before[0]["results"], "A's own rare-word documents must be found"
        assert all(
            h["scores"]["bm25"] is None or 0.0 <= h["scores"]["bm25"] <= 1.0 for h in before[0]["results"]
        )

        ok = client.post(
            "/v1/documents", json={"documents": B_DOCS}, headers={"Authorization": f"Bearer {b}"}
        )
        assert ok.status_code == 200 and ok.json()["indexed"] == len(B_DOCS)
        # the channel was open: the engine's own index-wide BM25 moved with B's documents
        df_after, engine_after = native(shared.index)
        assert df_after > df_before and engine_after != engine_before
        assert {c for c, _ in engine_after} == {c for c, _ in engine_before}  # A's same chunks
        after = observe()

    assert differences(before, after) == []


def differences(x: Any, y: Any, at: str = "") -> list[str]:
    """Where two responses differ, as paths (the assertion's message names the leaking field)."""
    if isinstance(x, dict) and isinstance(y, dict):
        return [d for k in sorted(set(x) | set(y)) for d in differences(x.get(k), y.get(k), f"{at}.{k}")]
    if isinstance(x, list) and isinstance(y, list) and len(x) == len(y):
        return [d for i, (u, v) in enumerate(zip(x, y, strict=True)) for d in differences(u, v, f"{at}[{i}]")]
    return [] if x == y else [f"{at}: {x!r} != {y!r}"]


def test_fixed_bm25_bounds_are_refused(runtime: Runtime, tmp_path: Path) -> None:
    """Fixed min-max bounds would put raw BM25 into the fused score: refused, and the schema says so."""
    keys = ApiKeyStore(tmp_path / "k.json")
    a, _ = keys.create(Principal(tenant="acme", user="mallory"))
    with TestClient(create_app(runtime, keys)) as client:
        r = client.post(
            "/v1/search",
            json={"query": RARE, "fusion": {"bounds": {"bm25": {"low": 0, "high": 100}}}},
            headers={"Authorization": f"Bearer {a}"},
        )
        assert r.status_code == 400 and "fixed bounds on bm25 are refused" in r.json()["message"]
        spec = client.get("/openapi.json").json()["components"]["schemas"]["FusionOptions"]
        assert spec["properties"]["bounds"]["not"] == {"required": ["bm25"]}
