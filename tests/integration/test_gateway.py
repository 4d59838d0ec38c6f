"""The HTTP API on a real runtime (real ONNX model, real on-disk index)."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.app import create_app

HANDBOOK = [
    {
        "id": "leave",
        "title": "Leave policy",
        "acl": {"groups": ["*"]},
        "text": "# Leave\n\nEvery employee gets 25 vacation days per year. Parental leave is sixteen weeks.",
    },
    {
        "id": "bands",
        "title": "Salary bands",
        "acl": {"groups": ["hr"]},
        "text": "Engineering salary bands: L3 earns 120k to 140k. Vacation days are not part of pay.",
    },
    {
        "id": "dana",
        "title": "Relocation",
        "acl": {"users": ["dana"]},
        "text": "Dana's relocation package covers vacation travel and 30 days of housing.",
    },
]


@pytest.fixture()
def api(runtime: Any, tmp_path: Any) -> Iterator[tuple[TestClient, dict[str, str]]]:
    keys = ApiKeyStore(tmp_path / "keys.json")
    made = {
        "writer": keys.create(Principal(tenant="acme", user="ops", scopes=["search", "ingest"]))[0],
        "alice": keys.create(Principal(tenant="acme", user="alice", groups=["eng"]))[0],
        "bob": keys.create(Principal(tenant="acme", user="bob", groups=["hr"]))[0],
        "dana": keys.create(Principal(tenant="acme", user="dana"))[0],
        "eve": keys.create(Principal(tenant="globex", user="eve", scopes=["search", "ingest"]))[0],
    }
    revoked_key, rec = keys.create(Principal(tenant="acme", user="gone"))
    keys.revoke(rec.id)
    made["revoked"] = revoked_key
    with TestClient(create_app(runtime, keys)) as client:
        yield client, made


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def ingest(client: TestClient, key: str, docs: list[dict[str, Any]]) -> Any:
    return client.post("/v1/documents", json={"documents": docs}, headers=auth(key))


def search(client: TestClient, key: str, query: str, **extra: Any) -> Any:
    return client.post("/v1/search", json={"query": query, **extra}, headers=auth(key))


def raw_search(client: TestClient, key: str, body: bytes) -> Any:
    """POST bytes as they are (malformed JSON, bad encodings)."""
    return client.post("/v1/search", content=body, headers={**auth(key), "content-type": "application/json"})


def docs_of(resp: Any) -> list[str]:
    assert resp.status_code == 200, resp.text
    return [r["doc_id"] for r in resp.json()["results"]]


def test_ingest_status_search_delete_roundtrip(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    r = ingest(client, k["writer"], HANDBOOK)
    assert r.status_code == 200, r.text
    assert r.json()["indexed"] == 3
    st = client.get("/v1/documents/leave/status", headers=auth(k["writer"]))
    assert st.json()["state"] == "indexed" and st.json()["chunks"] >= 1

    body = search(client, k["alice"], "how many vacation days").json()
    first = body["results"][0]
    assert first["doc_id"] == "leave"
    assert set(first["scores"]) == {"bm25", "dense", "rerank"} and first["fused"] > 0  # reranked by default
    assert first["header"].startswith("Title: Leave policy")
    assert body["request_id"]

    assert client.delete("/v1/documents/leave", headers=auth(k["writer"])).json() == {
        "id": "leave",
        "deleted": True,
    }
    assert "leave" not in docs_of(search(client, k["alice"], "vacation days"))
    assert client.get("/v1/documents/leave/status", headers=auth(k["writer"])).json()["state"] == "deleted"
    assert client.delete("/v1/documents/leave", headers=auth(k["writer"])).status_code == 404


def test_acl_is_enforced_per_principal(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    ingest(client, k["writer"], HANDBOOK)
    assert set(docs_of(search(client, k["alice"], "vacation days", top_k=10))) == {"leave"}
    assert set(docs_of(search(client, k["bob"], "vacation days", top_k=10))) == {"leave", "bands"}
    assert set(docs_of(search(client, k["dana"], "vacation days", top_k=10))) == {"leave", "dana"}
    assert docs_of(search(client, k["eve"], "vacation days", top_k=10)) == []


def test_idempotent_by_id_and_version(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    ingest(client, k["writer"], HANDBOOK[:1])
    again = ingest(client, k["writer"], HANDBOOK[:1]).json()
    assert again["results"][0]["outcome"] == "unchanged"
    changed = {**HANDBOOK[0], "text": "Vacation is now 30 days."}
    conflict = ingest(client, k["writer"], [changed]).json()["results"][0]
    assert (
        conflict["outcome"] == "rejected"
        and conflict["code"] == "conflict"
        and "version 2" in conflict["error"]
    )
    bumped = ingest(client, k["writer"], [{**changed, "version": 2}]).json()["results"][0]
    assert bumped["outcome"] == "indexed"
    stale = ingest(client, k["writer"], [HANDBOOK[0]]).json()["results"][0]
    assert stale["outcome"] == "rejected" and "older" in stale["error"]
    assert "30 days" in search(client, k["alice"], "vacation").json()["results"][0]["text"]


def test_binary_formats_via_base64(api: tuple[TestClient, dict[str, str]], tmp_path: Any) -> None:
    import docx

    d = docx.Document()
    d.add_heading("Travel", level=1)
    d.add_paragraph("Book economy class for flights under six hours.")
    path = tmp_path / "t.docx"
    d.save(str(path))
    client, k = api
    payload = {
        "id": "travel",
        "acl": {"groups": ["*"]},
        "source": "travel.docx",
        "content_base64": base64.b64encode(path.read_bytes()).decode(),
    }
    res = ingest(client, k["writer"], [payload]).json()["results"][0]
    assert res["outcome"] == "indexed", res
    hit = search(client, k["alice"], "economy flights").json()["results"][0]
    assert hit["doc_id"] == "travel" and hit["section_path"] == ["Travel"]


def test_bad_documents_fail_alone_with_reasons(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    docs = [
        HANDBOOK[0],
        {
            "id": "bin",
            "acl": {"groups": ["*"]},
            "content_base64": base64.b64encode(b"\x00\x01\xff\xfe" * 50).decode(),
        },
        {
            "id": "pdf",
            "acl": {"groups": ["*"]},
            "content_type": "application/pdf",
            "content_base64": base64.b64encode(b"%PDF-1.4 garbage").decode(),
        },
        {"id": "b64", "acl": {"groups": ["*"]}, "content_base64": "@@not base64@@"},
    ]
    body = ingest(client, k["writer"], docs).json()
    outcomes = {r["id"]: r for r in body["results"]}
    assert outcomes["leave"]["outcome"] == "indexed"
    for bad in ("bin", "pdf", "b64"):
        assert outcomes[bad]["outcome"] in ("failed", "rejected") and outcomes[bad]["error"], outcomes[bad]
    assert client.get("/v1/documents/pdf/status", headers=auth(k["writer"])).json()["state"] == "failed"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"documents": [{"id": "x", "acl": {"groups": ["*"]}, "text": "   "}]}, "text"),
        ({"documents": [{"id": "x", "acl": {}, "text": "hi"}]}, "acl"),
        ({"documents": [{"id": "x", "acl": {"groups": ["*"]}, "text": "hi", "colour": "red"}]}, "colour"),
        ({"documents": [{"id": "../etc/passwd", "acl": {"groups": ["*"]}, "text": "hi"}]}, "id"),
        (
            {"documents": [{"id": "x", "acl": {"groups": ["*"]}, "text": "a", "content_base64": "YQ=="}]},
            "exactly one",
        ),
        ({"documents": []}, "documents"),
    ],
)
def test_invalid_ingest_is_400_with_reason(
    api: tuple[TestClient, dict[str, str]], body: dict, field: str
) -> None:
    client, k = api
    r = client.post("/v1/documents", json=body, headers=auth(k["writer"]))
    assert r.status_code == 400, r.text
    err = r.json()
    assert err["code"] == "invalid_argument" and field in (err["message"] + str(err["details"]))


def test_errors_have_one_shape(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    cases = [
        (client.post("/v1/search", json={"query": "x"}), 401, "unauthenticated"),
        (
            client.post("/v1/search", json={"query": "x"}, headers=auth("rk_nope_nope")),
            401,
            "unauthenticated",
        ),
        (client.post("/v1/search", json={"query": "x"}, headers=auth(k["revoked"])), 401, "unauthenticated"),
        (raw_search(client, k["alice"], b"{not json"), 400, "invalid_argument"),
        (raw_search(client, k["alice"], b'{"query": "caf\xe9"}'), 400, "invalid_argument"),
        (search(client, k["alice"], "x", colour="red"), 400, "invalid_argument"),
        (search(client, k["alice"], "   "), 400, "invalid_argument"),
        (search(client, k["alice"], "x", top_k=100000), 400, "invalid_argument"),
        (search(client, k["alice"], "x", tenant="globex"), 403, "permission_denied"),
        (
            search(client, k["alice"], "x", fusion={"weights": {"bm25": 0, "dense": 0}}),
            400,
            "invalid_argument",
        ),
        (search(client, k["alice"], "x", fusion={"weights": {"sparse": 1}}), 400, "invalid_argument"),
        (search(client, k["alice"], "x" * 5000), 400, "invalid_argument"),
        (ingest(client, k["alice"], HANDBOOK), 403, "permission_denied"),
        (ingest(client, k["eve"], [{**HANDBOOK[0], "tenant": "acme"}]), 403, "permission_denied"),
        (client.get("/v1/documents/nope/status", headers=auth(k["writer"])), 404, "not_found"),
        (client.get("/v1/nothing"), 404, "not_found"),
    ]
    for resp, status, code in cases:
        assert resp.status_code == status, (resp.request.url, resp.text)
        body = resp.json()
        assert set(body) == {"code", "message", "details"} and body["code"] == code, body
        assert body["message"]


def test_body_size_limit(api: tuple[TestClient, dict[str, str]], runtime: Any) -> None:
    client, k = api
    big = "word " * (runtime.settings.gateway.max_body_bytes // 5 + 10)
    r = ingest(client, k["writer"], [{"id": "big", "acl": {"groups": ["*"]}, "text": big}])
    assert r.status_code == 413 and r.json()["code"] == "payload_too_large"


def test_document_size_limit(api: tuple[TestClient, dict[str, str]], runtime: Any) -> None:
    client, k = api
    text = "word " * (runtime.settings.gateway.max_document_bytes // 5 + 10)
    r = ingest(client, k["writer"], [{"id": "big", "acl": {"groups": ["*"]}, "text": text}]).json()
    assert r["results"][0]["code"] == "payload_too_large"
    assert client.get("/v1/documents/big/status", headers=auth(k["writer"])).status_code == 404


def test_rate_limit(runtime: Any, tmp_path: Any) -> None:
    runtime.settings.gateway.rate_limit_per_minute = 3
    keys = ApiKeyStore(tmp_path / "k.json")
    key, _ = keys.create(Principal(tenant="acme", user="a"))
    with TestClient(create_app(runtime, keys)) as client:
        codes = [search(client, key, "x").status_code for _ in range(5)]
    assert codes[:3] == [200, 200, 200] and codes[3:] == [429, 429]


def test_fusion_options_and_filters(api: tuple[TestClient, dict[str, str]]) -> None:
    client, k = api
    ingest(client, k["writer"], HANDBOOK)
    fused_only = {"enabled": False}  # these assertions are about fusion itself
    for method in ("minmax", "zscore", "rrf"):
        body = search(client, k["bob"], "salary bands", fusion={"method": method}, rerank=fused_only).json()
        assert body["results"][0]["doc_id"] == "bands", method
    only_bm25 = search(
        client, k["bob"], "salary bands", fusion={"weights": {"bm25": 1, "dense": 0}}, rerank=fused_only
    ).json()
    assert set(only_bm25["results"][0]["scores"]) == {"bm25"}
    filtered = search(client, k["bob"], "vacation", filters={"doc_ids": ["bands"]}, top_k=10)
    assert set(docs_of(filtered)) == {"bands"}


def test_request_id_is_echoed_only_when_safe(api: tuple[TestClient, dict[str, str]]) -> None:
    client, _ = api
    ok = client.get("/healthz", headers={"x-request-id": "trace-1234abcd"})
    assert ok.headers["x-request-id"] == "trace-1234abcd"
    bad = client.get("/healthz", headers={"x-request-id": "x' OR 1=1; <script>"})
    assert bad.headers["x-request-id"] != "x' OR 1=1; <script>" and len(bad.headers["x-request-id"]) == 32


def test_health_ready_metrics_openapi(api: tuple[TestClient, dict[str, str]]) -> None:
    client, _ = api
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json()["status"] == "ready"
    assert "rampart_http_request_seconds" in client.get("/metrics").text
    spec = client.get("/openapi.json").json()
    for path in ("/v1/documents", "/v1/documents/{doc_id}/status", "/v1/documents/{doc_id}", "/v1/search"):
        assert path in spec["paths"]
    search_op = spec["paths"]["/v1/search"]["post"]
    assert {"200", "400", "401", "403", "429"} <= set(search_op["responses"])
    assert "ErrorBody" in spec["components"]["schemas"]
