"""The distributed stack end to end: ingest, search, answer and ACLs through the gateway; the same
answers as the embedded mode; every service stopped in turn (degrade or fail clearly, recover)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from services.common.settings import RampartSettings
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.app import create_app
from services.orchestrator.runtime import Runtime
from services.rerank.reranker import Reranker
from services.retrieval.embedder import Embedder
from tests import trace_topology as topology
from tests.e2e.conftest import Stack

DOCS = [
    (
        "leave",
        "Parental leave policy",
        ["*"],
        "Primary caregivers receive 20 weeks of paid parental leave. Secondary caregivers receive 6 weeks "
        "of paid leave, to be taken within the first year.",
    ),
    (
        "vpn",
        "VPN setup for engineers",
        ["eng"],
        "Engineers connect to the corporate VPN with the WireGuard client and a hardware security key. "
        "The VPN endpoint is vpn.example.internal.",
    ),
    (
        "salary",
        "Salary review",
        ["hr"],
        "Salary bands are reviewed every April by the compensation committee and published to HR only.",
    ),
    (
        "expenses",
        "Travel expenses",
        ["*"],
        "Travel expenses are reimbursed within 30 days when submitted with receipts in the finance portal.",
    ),
    (
        "laptops",
        "Laptop refresh",
        ["*"],
        "Company laptops are replaced every three years; request a refresh through the IT service desk.",
    ),
]
QUERIES = [
    "how many weeks of parental leave do primary caregivers get",
    "how do engineers connect to the VPN",
    "when are travel expenses reimbursed",
    "how often are laptops replaced",
]


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def documents() -> list[dict[str, Any]]:
    return [{"id": i, "title": t, "acl": {"groups": g}, "text": x} for i, t, g, x in DOCS]


def ids(body: dict[str, Any]) -> list[str]:
    return [h["doc_id"] for h in body["results"]]


@pytest.fixture(scope="module")
def loaded(stack: Stack) -> Stack:
    with stack.client() as c:
        r = c.post("/v1/documents", json={"documents": documents()}, headers=auth(stack.keys["writer"]))
        assert r.status_code == 200, r.text
        assert r.json()["indexed"] == len(DOCS), r.text
    return stack


def test_ingest_is_idempotent_and_reports_status(loaded: Stack) -> None:
    with loaded.client() as c:
        again = c.post("/v1/documents", json={"documents": documents()}, headers=auth(loaded.keys["writer"]))
        assert again.status_code == 200 and again.json()["unchanged"] == len(DOCS), again.text
        st = c.get("/v1/documents/leave/status", headers=auth(loaded.keys["writer"]))
        assert st.status_code == 200 and st.json()["state"] == "indexed", st.text


def test_search_and_answer_through_the_stack(loaded: Stack) -> None:
    with loaded.client() as c:
        r = c.post("/v1/search", json={"query": QUERIES[0], "top_k": 3}, headers=auth(loaded.keys["alice"]))
        assert r.status_code == 200, r.text
        body = r.json()
        assert ids(body)[0] == "leave"
        assert body["degraded"] == [], body["degraded"]
        assert all(h["verdict"] is not None for h in body["results"])  # fact-checked by the workers
        assert re.fullmatch(r"[0-9a-f]{32}", body["trace_id"]), body.get("trace_id")
        a = c.post("/v1/answer", json={"query": QUERIES[0]}, headers=auth(loaded.keys["alice"]))
        assert a.status_code == 200, a.text
        answer = a.json()
        assert "20 weeks" in answer["answer"]
        assert any(cite["doc_id"] == "leave" for cite in answer["citations"])


def test_acls_hold_in_the_stack(loaded: Stack) -> None:
    with loaded.client() as c:
        q = {"query": "VPN WireGuard hardware key", "top_k": 10}
        alice = c.post("/v1/search", json=q, headers=auth(loaded.keys["alice"])).json()
        bob = c.post("/v1/search", json=q, headers=auth(loaded.keys["bob"])).json()
        eve = c.post("/v1/search", json=q, headers=auth(loaded.keys["other"])).json()
        assert "vpn" in ids(alice)
        assert "vpn" not in ids(bob) and "salary" not in ids(alice)
        assert ids(eve) == []  # another tenant sees nothing of acme's
        r = c.get("/v1/documents/leave/status", headers=auth(loaded.keys["bob"]))
        assert r.status_code == 403  # bob's key has no ingest scope


def test_same_results_as_the_embedded_mode(
    loaded: Stack, tmp_path: Path, models_dir: Path, embedder: Embedder, reranker: Reranker
) -> None:
    """Same documents, same queries: the embedded gateway (onnx rerank, in-process fact-check) and the
    stack (Triton, Celery, gRPC retrieval, Ray Serve) return the same documents, order and verdicts."""
    settings = RampartSettings(data_dir=tmp_path / "data", models_dir=models_dir, log_level="WARNING")
    rt = Runtime.open(settings, embedder=embedder, reranker=reranker)
    keys = ApiKeyStore(tmp_path / "keys.json")
    writer = keys.create(Principal(tenant="acme", user="ops", scopes=["search", "ingest"]))[0]
    alice = keys.create(Principal(tenant="acme", user="alice", groups=["eng"]))[0]
    try:
        with TestClient(create_app(rt, keys)) as local, loaded.client() as remote:
            assert local.post("/v1/documents", json={"documents": documents()}, headers=auth(writer)).json()[
                "indexed"
            ] == len(DOCS)
            for q in QUERIES:
                for path in ("/v1/search", "/v1/answer"):
                    mine = local.post(path, json={"query": q, "top_k": 5}, headers=auth(alice)).json()
                    theirs = remote.post(
                        path, json={"query": q, "top_k": 5}, headers=auth(loaded.keys["alice"])
                    ).json()
                    assert ids(mine) == ids(theirs), (q, path)
                    assert [h["verdict"]["verdict"] for h in mine["results"]] == [
                        h["verdict"]["verdict"] for h in theirs["results"]
                    ], (q, path)
                    for a, b in zip(mine["results"], theirs["results"], strict=True):
                        assert a["fused"] == pytest.approx(b["fused"], abs=1e-3), (q, path)
                    if path == "/v1/answer":
                        assert mine["answer"] == theirs["answer"], q
    finally:
        rt.close()


_asked = iter(range(1_000_000))


def test_one_trace_across_every_service(loaded: Stack) -> None:
    """The declared edges (tests/trace_topology.py) hold in the spans the services exported over OTLP."""
    with loaded.client() as c:
        r = c.post(
            "/v1/search",
            json={"query": "trace: how often are company laptops replaced", "top_k": 3},
            headers=auth(loaded.keys["alice"]),
        )
        assert r.status_code == 200, r.text
        trace_id = r.json()["trace_id"]
        assert r.headers["x-trace-id"] == trace_id
        doc = {"id": "traced", "title": "Parking", "acl": {"groups": ["*"]}, "text": "Parking is free."}
        w = c.post("/v1/documents", json={"documents": [doc]}, headers=auth(loaded.keys["writer"]))
        assert w.status_code == 200, w.text
        ingest_trace = w.headers["x-trace-id"]
    loaded.receiver.wait_for(lambda spans: not topology.missing(spans, topology.SEARCH_STACK), trace_id, 30)
    loaded.receiver.wait_for(
        lambda spans: not topology.missing(spans, topology.INGEST_STACK), ingest_trace, 30
    )


def test_every_service_serves_prometheus_metrics(loaded: Stack) -> None:
    s = loaded.settings
    with loaded.client() as c:
        assert _search(c, loaded).status_code == 200
        gateway = c.get("/metrics").text
    assert 'rampart_http_request_seconds_count{route="/v1/search"' in gateway
    assert 'rampart_factcheck_verdicts_total{verdict="relevant"}' in gateway
    scraped = {
        name: httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
        for name, port in (
            ("retrieval", s.retrieval_service.metrics_port),
            ("ingest", s.ingest_service.metrics_port),
            ("orchestrator", s.serve.metrics_port),
            ("worker", s.stack.worker_metrics_port),
        )
    }
    assert 'rampart_requests_total{code="ok",method="Search",service="retrieval"}' in scraped["retrieval"]
    assert 'service="ingest"' in scraped["ingest"]  # the documents ingested above
    assert 'rampart_stage_duration_seconds_count{stage="retrieve"}' in scraped["orchestrator"]
    # summed over the worker's prefork processes
    assert (
        'rampart_requests_total{code="ok",method="evidence_batch",service="factcheck-worker"}'
        in (scraped["worker"])
    )


def test_the_orchestrator_refuses_callers_without_the_internal_token(loaded: Stack) -> None:
    """The ingress trusts the principal in the body, so only the gateway (holding the token) may call."""
    url = f"http://127.0.0.1:{loaded.settings.serve.port}/v1/search"
    forged = {
        "principal": {"tenant": "acme", "user": "alice", "groups": ["hr"]},
        "request": {"query": "salary"},
    }
    r = httpx.post(url, json=forged, timeout=30)
    assert r.status_code == 401 and r.json()["code"] == "unauthenticated", r.text
    r = httpx.post(url, json=forged, headers={"x-rampart-internal-token": "guess"}, timeout=30)
    assert r.status_code == 401, r.text


def test_the_stack_runs_with_mtls_redis_auth_and_ray_auth(loaded: Stack) -> None:
    """Issue 36's defaults: the gRPC services take only callers with a certificate of the stack's CA
    and the token, Redis only its role users, Ray only holders of its token (a file of mode 600);
    supervisord's config file holds none of these secrets."""
    import os
    import stat

    import grpc
    import redis
    from grpc_health.v1 import health_pb2

    from services.common.config import ServiceTlsSettings
    from services.common.dev_certs import DevCerts
    from services.common.errors import ErrorCode, RampartError
    from services.common.grpc_client import open_channel
    from services.common.service_auth import ServiceAuth, TlsMaterial
    from services.retrieval.remote_index import RemoteIndex

    s, folder = loaded.settings, loaded.supervisor.dir
    certs = DevCerts(folder / "certs")
    address = f"127.0.0.1:{s.retrieval_service.port}"
    tls = TlsMaterial.read(
        ServiceTlsSettings(
            # the orchestrator's: retrieval admits only its callers (retrieval_service.allowed_callers)
            enabled=True,
            ca_file=certs.ca,
            cert_file=certs.cert("orchestrator"),
            key_file=certs.key("orchestrator"),
        )
    )
    token = s.remote.internal_token.get_secret_value() if s.remote.internal_token else ""
    index = RemoteIndex(
        open_channel(address, auth=ServiceAuth(token, tls)),
        address,
        deadline_ms=10_000,
        write_deadline_ms=10_000,
    )
    alice = Principal(tenant="acme", user="alice", groups=["eng"])
    readable = {c.doc_id for c in index.chunks(list(range(1, 200)), alice).values()}
    assert readable and "salary" not in readable  # hr's document: not alice's, asked for by id
    # the orchestrator's certificate reads; the index's writes belong to ingest's (write_callers)
    with pytest.raises(RampartError) as denied:
        index.delete("acme", sorted(readable)[0])
    assert denied.value.code is ErrorCode.PERMISSION_DENIED, denied.value
    assert readable <= {c.doc_id for c in index.chunks(list(range(1, 200)), alice).values()}
    index.close()
    for auth in (ServiceAuth(), ServiceAuth(token=token), ServiceAuth(tls=tls)):
        channel = open_channel(address, auth=auth)
        stub = channel.unary_unary(
            "/rampart.retrieval.v1.IndexService/Stats",
            request_serializer=lambda m: b"",
            response_deserializer=lambda b: b,
        )
        with pytest.raises(grpc.RpcError) as err:
            stub(health_pb2.HealthCheckRequest(), timeout=10)
        want = grpc.StatusCode.UNAUTHENTICATED if auth.tls is not None else grpc.StatusCode.UNAVAILABLE
        assert err.value.code() == want, (auth, err.value)
        channel.close()
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=s.stack.redis_port, socket_timeout=5).ping()
    token_file = folder / "ray-auth-token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    orchestrator = next(p for p in loaded.supervisor.states() if p.name == "orchestrator")
    environ = Path(f"/proc/{orchestrator.pid}/environ").read_bytes().split(b"\0")
    assert b"RAY_AUTH_MODE=token" in environ and f"RAY_AUTH_TOKEN_PATH={token_file}".encode() in environ
    conf = (folder / "supervisord.conf").read_text()
    assert token_file.read_text() not in conf and (token and token not in conf)
    # Triton: the orchestrator's certificate without the stack's caller key gets nothing but health
    # (with it, searches are reranked undegraded: test_search_and_answer_through_the_stack)
    from services.rerank.config import TritonSettings, TritonTlsSettings
    from services.rerank.triton_reranker import TritonReranker

    triton_tls = TritonTlsSettings(
        enabled=True,
        ca_file=certs.ca,
        cert_file=certs.cert("orchestrator"),
        key_file=certs.key("orchestrator"),
    )
    keyless = TritonSettings(url=f"127.0.0.1:{s.stack.triton_grpc_port}", tls=triton_tls, retries=0)
    with pytest.raises(RampartError) as refused:
        TritonReranker.connect(keyless)
    assert refused.value.code is ErrorCode.PERMISSION_DENIED, refused.value
    # the orchestrator has it, from the environment
    assert any(e.startswith(b"RAMPART_RERANK__TRITON__KEY=") and len(e) > 40 for e in environ)
    assert not any(b"TRITON__KEY" in line for line in conf.encode().splitlines())
    assert "redis://orchestrator:" not in conf and "%(ENV_RAMPART_STACK_REDIS_URL_WORKER_BROKER)s" in conf
    assert (
        os.path.exists(certs.key("retrieval"))
        and stat.S_IMODE(certs.key("retrieval").stat().st_mode) == 0o600
    )


def _search(c: httpx.Client, stack: Stack) -> httpx.Response:
    """A query about travel expenses never sent before: the reranker's score cache must not hide an
    outage (a cached query needs no Triton)."""
    query = f"when are travel expenses reimbursed, case {next(_asked)}"
    return c.post("/v1/search", json={"query": query, "top_k": 3}, headers=auth(stack.keys["alice"]))


def _recovered(stack: Stack) -> dict[str, Any]:
    stack.wait_ready()
    with stack.client() as c:
        deadline = time.monotonic() + 60
        while True:
            r = _search(c, stack)
            if r.status_code == 200 and r.json()["degraded"] == []:
                return dict(r.json())
            assert time.monotonic() < deadline, r.text
            time.sleep(1.0)


@pytest.mark.parametrize(
    ("program", "expect"),
    [
        ("triton", "degraded:rerank"),
        ("worker", "degraded:factcheck"),
        ("ingest", "ingest-refused"),
        ("retrieval", "fails:unavailable"),
        ("orchestrator", "fails:unavailable"),
        ("redis", "degraded:factcheck"),
    ],
)
def test_stopping_a_service_degrades_or_fails_clearly_then_recovers(
    loaded: Stack, program: str, expect: str
) -> None:
    sup = loaded.supervisor
    sup.stop_program(program)
    try:
        with loaded.client(timeout=120) as c:
            r = _search(c, loaded)
            kind, what = expect.split(":") if ":" in expect else (expect, "")
            if kind == "degraded":
                assert r.status_code == 200, r.text
                assert what in r.json()["degraded"], r.json()
                assert ids(r.json())[0] == "expenses"  # still the right answer, flagged
            elif kind == "fails":
                assert r.status_code in (503, 504), r.text
                assert r.json()["code"] in ("unavailable", "deadline_exceeded"), r.text
                assert r.json()["message"], r.text
            else:  # ingest down: documents are refused clearly, search keeps serving
                doc = {"id": "late", "title": "Late", "acl": {"groups": ["*"]}, "text": "Late document."}
                w = c.post("/v1/documents", json={"documents": [doc]}, headers=auth(loaded.keys["writer"]))
                assert w.status_code == 503 and w.json()["code"] == "unavailable", w.text
                assert r.status_code == 200 and ids(r.json())[0] == "expenses", r.text
    finally:
        sup.start_program(program)
    after = _recovered(loaded)
    assert ids(after)[0] == "expenses"


def test_a_crashed_ingest_service_loses_nothing_acknowledged(loaded: Stack) -> None:
    """SIGKILL (no graceful stop): supervisord restarts it; what was acknowledged is indexed."""
    with loaded.client(timeout=120) as c:
        doc = {
            "id": "crash",
            "title": "Badges",
            "acl": {"groups": ["*"]},
            "text": "Visitor badges are at reception.",
        }
        r = c.post("/v1/documents", json={"documents": [doc]}, headers=auth(loaded.keys["writer"]))
        assert r.status_code == 200 and r.json()["indexed"] == 1, r.text
        loaded.supervisor.kill_program("ingest")
        loaded.supervisor.kill_program("retrieval")
        _recovered(loaded)
        found = c.post(
            "/v1/search",
            json={"query": "visitor badges reception", "top_k": 3},
            headers=auth(loaded.keys["alice"]),
        )
        assert found.status_code == 200 and ids(found.json())[0] == "crash", found.text
