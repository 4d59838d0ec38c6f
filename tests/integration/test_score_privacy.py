"""No leak through scores (issue 36, point 5): a tenant cannot tell from anything a search or an
answer returns whether another tenant wrote a rare word.

The attack: tenant A plants documents with a made-up word and searches for it. If BM25's statistics
(how many chunks hold the word, how many chunks there are, their average length) counted every
tenant's chunks, tenant B writing the word would lower its IDF and move A's scores, and a two-word
query would reorder A's results. The test runs A's searches and an answer before and after B ingests
documents full of that word, on one embedded index, and compares the whole responses but the
request ids and timings. It first checks that B's documents did move the index-wide statistics, so
the channel it closes was really open.

B already holds a document when A first looks: the question is whether B wrote the word, not
whether a second tenant exists (the first other tenant switches the index from tantivy's own scores
to the per-tenant rescoring, which differs in the ninth digit; docs/security.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.app import create_app
from services.orchestrator.runtime import Runtime

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


def without_volatile(body: Any) -> Any:
    """The response without what differs between any two calls (ids, timings)."""
    if isinstance(body, dict):
        return {k: without_volatile(v) for k, v in body.items() if k not in VOLATILE}
    if isinstance(body, list):
        return [without_volatile(v) for v in body]
    return body


def test_a_tenant_cannot_detect_another_tenants_rare_term(runtime: Runtime, tmp_path: Path) -> None:
    keys = ApiKeyStore(tmp_path / "k.json")
    a, _ = keys.create(Principal(tenant="acme", user="mallory", scopes=["search", "ingest"]))
    b, _ = keys.create(Principal(tenant="globex", user="erin", scopes=["ingest"]))
    bm25 = runtime.index.bm25_index  # type: ignore[attr-defined]  # the embedded index's tantivy half
    with TestClient(create_app(runtime, keys)) as client:

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
        [term] = bm25.analyze(RARE)
        global_df_before = bm25.doc_freqs([term])[term]
        tantivy_before = bm25.search(RARE, tenant="acme", acl_tokens=["g:*"], limit=10)
        before = observe()
        assert before[0]["results"], "A's own rare-word documents must be found"
        assert all(
            h["scores"]["bm25"] is None or 0.0 <= h["scores"]["bm25"] <= 1.0 for h in before[0]["results"]
        )

        ok = client.post(
            "/v1/documents", json={"documents": B_DOCS}, headers={"Authorization": f"Bearer {b}"}
        )
        assert ok.status_code == 200 and ok.json()["indexed"] == len(B_DOCS)
        # the channel was open: index-wide statistics (tantivy's own scores) moved with B's documents
        assert bm25.doc_freqs([term])[term] > global_df_before
        assert bm25.search(RARE, tenant="acme", acl_tokens=["g:*"], limit=10) != tantivy_before
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
