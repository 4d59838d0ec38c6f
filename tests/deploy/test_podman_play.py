"""The Helm chart's small profile run as real containers (``make test-deploy``): the images of
``make images`` under ``podman kube play``, documents ingested and searched and an answer given through
the gateway with ACLs and fact-check verdicts (as tests/e2e does on the supervisord stack), the
service-to-service controls checked from outside the pods (the orchestrator's internal token, mTLS and
the token on the gRPC services, the Redis ACL users), one pod stopped to watch the response degrade as
docs/stack.md says, then everything torn down.

tests/deploy_podman.py adapts the rendered chart to podman (its docstring lists what and why).
Timings land in ``out/deploy-podman.json`` (docs/deploy.md quotes them).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import redis

from services.common.internal_auth import INTERNAL_TOKEN_HEADER
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from tests import deploy_podman as dp
from tests.deploy_images import DEPLOYED, REGISTRY
from tests.e2e.test_stack import DOCS, QUERIES, auth, documents, ids

REPORT = dp.ROOT / "out" / "deploy-podman.json"
READY_TIMEOUT_S = float(os.environ.get("RAMPART_DEPLOY_READY_TIMEOUT_S", "420"))
STAGES = ("ingest", "rerank", "factcheck")


@dataclass
class Deployed:
    adapted: dp.Adapted
    gateway: str
    token: str
    keys: dict[str, str]
    timings: dict[str, Any]

    def client(self, timeout: float = 120.0) -> httpx.Client:
        return httpx.Client(base_url=self.gateway, timeout=timeout)


def _preconditions(tag: str) -> None:
    if shutil.which("podman") is None:
        pytest.fail(
            "podman is not installed: run `make test-deploy` (its `make container-tools` installs it)"
        )
    if os.geteuid() != 0:
        pytest.fail(
            "needs root: the host reaches the pods over podman's bridge network, which rootless podman lacks"
        )
    if not os.environ.get("CONTAINERS_CONF"):
        pytest.fail(
            "CONTAINERS_CONF is not set: run `make test-deploy` (it points podman at .cache/containers)"
        )
    missing = [n for n in DEPLOYED if not dp.image_exists(f"{REGISTRY}/{n}:{tag}")]
    if missing:
        pytest.fail(f"images {missing} (tag {tag}) are not built: run `make images`")


def _keys(work: Path, pepper: str) -> tuple[str, dict[str, str]]:
    """API keys as the e2e suite makes them, hashed with the release's pepper (the gateway's
    RAMPART_KEY_PEPPER); the hashed key file becomes the chart's rampart-api-keys."""
    store = ApiKeyStore(work / "api-keys.json", pepper=pepper)
    keys = {
        "writer": store.create(Principal(tenant="acme", user="ops", scopes=["search", "ingest", "admin"]))[0],
        "alice": store.create(Principal(tenant="acme", user="alice", groups=["eng"]))[0],
        "bob": store.create(Principal(tenant="acme", user="bob", groups=["hr"]))[0],
        "other": store.create(Principal(tenant="globex", user="eve", groups=["eng"]))[0],
    }
    return (work / "api-keys.json").read_text(), keys


def wait_stages(gateway: str, token: str, timeout_s: float, adapted: dp.Adapted) -> float:
    """Seconds until the gateway's /readyz says every stage is ready (read with the internal token, as
    `rampart stack up` does); on time-out, the pods' logs are in the error."""
    started = time.monotonic()
    last = "no answer"
    with httpx.Client(timeout=5.0, headers={INTERNAL_TOKEN_HEADER: token}) as client:
        while time.monotonic() - started < timeout_s:
            try:
                r = client.get(f"{gateway}/readyz")
                body = r.json()
                if r.status_code == 200 and all(body.get(s) == "ready" for s in STAGES):
                    return round(time.monotonic() - started, 1)
                last = f"HTTP {r.status_code}: {body}"
            except (httpx.HTTPError, ValueError) as exc:
                last = f"gateway not answering ({type(exc).__name__})"
            time.sleep(2.0)
    logs = "\n".join(line for b in adapted.bundles for line in dp.container_logs(b, 15))
    raise TimeoutError(f"not ready after {timeout_s:.0f} s: {last}\n{logs}")


@pytest.fixture(scope="module")
def deployed() -> Iterator[Deployed]:
    tag = os.environ.get("IMAGE_TAG", "0.1.0")
    _preconditions(tag)
    work = Path(tempfile.mkdtemp(prefix="rampart-kube-"))  # 0700: the adapted manifests hold secrets
    rendered = dp.render_small()
    generated = dp.rendered_secrets(rendered)
    key_file, keys = _keys(work, generated["rampart-key-pepper"]["pepper"])
    secrets = {**generated, "rampart-api-keys": {"api-keys.json": key_file}}
    adapted = dp.adapt(rendered, secrets)
    dp.teardown(adapted, work)  # leftovers of an interrupted run
    token = secrets["rampart-internal-token"]["token"]
    try:
        started = time.monotonic()
        plays = dp.play(adapted, work)
        gateway = f"http://{dp.pod_ip('rampart-gateway-pod-0')}:8080"
        http_s = dp.wait_http(f"{gateway}/healthz", READY_TIMEOUT_S)
        stages_s = wait_stages(gateway, token, READY_TIMEOUT_S, adapted)
        timings: dict[str, Any] = {
            "kube_play_s": plays,
            "gateway_http_after_play_s": http_s,
            "all_stages_ready_after_play_s": round(time.monotonic() - started, 1),
            "stages_wait_s": stages_s,
        }
        yield Deployed(adapted, gateway, token, keys, timings)
    finally:
        problems = dp.teardown(adapted, work)
        shutil.rmtree(work, ignore_errors=True)
        assert not problems, problems


@pytest.fixture(scope="module")
def loaded(deployed: Deployed) -> Deployed:
    with deployed.client() as c:
        started = time.monotonic()
        r = c.post("/v1/documents", json={"documents": documents()}, headers=auth(deployed.keys["writer"]))
        assert r.status_code == 200, r.text
        assert r.json()["indexed"] == len(DOCS), r.text
        deployed.timings["ingest_5_docs_s"] = round(time.monotonic() - started, 2)
    return deployed


def test_every_workload_of_the_profile_runs(deployed: Deployed) -> None:
    """Each Deployment (and former StatefulSet) of the rendered small profile has its pod running."""
    names = {b.name for b in deployed.adapted.bundles}
    assert names == {
        f"rampart-{n}"
        for n in ("gateway", "orchestrator", "retrieval", "ingest", "worker", "triton", "redis")
    }
    running = set(dp.podman("pod", "ps", "--filter", "status=running", "--format", "{{.Name}}").split())
    for bundle in deployed.adapted.bundles:
        assert set(bundle.pods) <= running, (bundle.name, running)


def test_search_and_answer_with_verdicts(loaded: Deployed) -> None:
    with loaded.client() as c:
        started = time.monotonic()
        r = c.post("/v1/search", json={"query": QUERIES[0], "top_k": 3}, headers=auth(loaded.keys["alice"]))
        loaded.timings["first_search_s"] = round(time.monotonic() - started, 2)
        assert r.status_code == 200, r.text
        body = r.json()
        assert ids(body)[0] == "leave", body
        assert body["degraded"] == [], body["degraded"]
        assert all(h["verdict"] is not None for h in body["results"]), body  # judged by the worker pod
        for q, want in zip(QUERIES[1:], ("vpn", "expenses", "laptops"), strict=True):
            hit = c.post("/v1/search", json={"query": q, "top_k": 3}, headers=auth(loaded.keys["alice"]))
            assert hit.status_code == 200 and ids(hit.json())[0] == want, (q, hit.text)
        a = c.post("/v1/answer", json={"query": QUERIES[0]}, headers=auth(loaded.keys["alice"]))
        assert a.status_code == 200, a.text
        assert "20 weeks" in a.json()["answer"], a.json()
        assert any(cite["doc_id"] == "leave" for cite in a.json()["citations"]), a.json()


def test_acls_hold(loaded: Deployed) -> None:
    with loaded.client() as c:
        q = {"query": "VPN WireGuard hardware key", "top_k": 10}
        alice = c.post("/v1/search", json=q, headers=auth(loaded.keys["alice"])).json()
        bob = c.post("/v1/search", json=q, headers=auth(loaded.keys["bob"])).json()
        eve = c.post("/v1/search", json=q, headers=auth(loaded.keys["other"])).json()
        assert "vpn" in ids(alice) and "salary" not in ids(alice), alice
        assert "vpn" not in ids(bob), bob
        assert ids(eve) == [], eve  # another tenant sees nothing of acme's
        r = c.get("/v1/documents/leave/status", headers=auth(loaded.keys["bob"]))
        assert r.status_code == 403, r.text  # bob's key has no ingest scope
        assert c.post("/v1/search", json=q, headers=auth("rk_not-a-key")).status_code == 401


def test_orchestrator_refuses_a_caller_without_the_internal_token(loaded: Deployed) -> None:
    """Only the gateway holds the token (a Secret); the ingress trusts the principal in the body."""
    url = f"http://{dp.pod_ip('rampart-orchestrator-pod-0')}:8090/v1/search"
    forged = {
        "principal": {"tenant": "acme", "user": "alice", "groups": ["hr"]},
        "request": {"query": "salary"},
    }
    r = httpx.post(url, json=forged, timeout=30)
    assert r.status_code == 401, r.text


def _retrieval_call(
    address: str, credentials: grpc.ChannelCredentials | None, token: str | None
) -> grpc.StatusCode:
    """The status of IndexService/Info at ``address`` (OK or the refusal), over TLS checked against the
    retrieval Service's name when ``credentials`` are given."""
    from rampart.retrieval.v1 import index_pb2, index_pb2_grpc

    if credentials is None:
        channel = grpc.insecure_channel(address)
    else:
        channel = grpc.secure_channel(
            address, credentials, options=[("grpc.ssl_target_name_override", "rampart-retrieval")]
        )
    metadata = [(INTERNAL_TOKEN_HEADER, token)] if token else None
    with channel:
        try:
            index_pb2_grpc.IndexServiceStub(channel).Info(
                index_pb2.InfoRequest(), timeout=10, metadata=metadata
            )
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def test_grpc_refuses_callers_without_a_certificate_of_the_release(loaded: Deployed) -> None:
    """Retrieval's gRPC port, from outside the pods: plaintext and TLS without a client certificate fail
    the handshake; the gateway's certificate without the token is UNAUTHENTICATED; with both (what the
    orchestrator and ingest hold, from their own Secrets) the call passes. The kubelet's plaintext
    health port answers health and nothing else."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    ip = dp.pod_ip(loaded.adapted.bundle("rampart-retrieval").pods[0])
    address = f"{ip}:50051"
    tls = loaded.adapted.volume_secrets["rampart-gateway-tls"]
    ca, cert, key = (tls[k].encode() for k in ("ca.crt", "tls.crt", "tls.key"))
    anonymous = grpc.ssl_channel_credentials(root_certificates=ca)
    member = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
    assert _retrieval_call(address, None, loaded.token) == grpc.StatusCode.UNAVAILABLE  # plaintext
    assert _retrieval_call(address, anonymous, loaded.token) == grpc.StatusCode.UNAVAILABLE
    assert _retrieval_call(address, member, None) == grpc.StatusCode.UNAUTHENTICATED
    assert _retrieval_call(address, member, loaded.token) == grpc.StatusCode.OK
    health_port = f"{ip}:50061"
    with grpc.insecure_channel(health_port) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
    assert _retrieval_call(health_port, None, loaded.token) == grpc.StatusCode.UNIMPLEMENTED


def test_redis_admits_each_role_only(loaded: Deployed) -> None:
    """The Redis pod from outside: no credentials, the default user, or a role with another role's
    password are refused; the gateway's user holds the shared rate-limit buckets and reaches no other
    key; the probe user may only PING; the worker's user works (the fact-check verdicts above went
    through it) but may not flush or reconfigure the server."""
    ip = dp.pod_ip(loaded.adapted.bundle("rampart-redis").pods[0])
    secrets = loaded.adapted.env_secrets

    def client(user: str | None = None, password: str | None = None, db: int = 0) -> redis.Redis:
        return redis.Redis(host=ip, port=6379, db=db, username=user, password=password, socket_timeout=10)

    worker = secrets["rampart-redis-worker"]["password"]
    with pytest.raises(redis.exceptions.AuthenticationError):
        client().ping()  # the default user, no password
    with pytest.raises(redis.exceptions.AuthenticationError):
        client("default", worker).ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        client("orchestrator", worker).ping()
    with pytest.raises(redis.exceptions.AuthenticationError):
        client("gateway", worker).ping()
    # the gateway's rate-limit buckets live here (the searches above drew from them), and its user
    # reaches nothing else
    as_gateway = client("gateway", secrets["rampart-redis-gateway"]["password"], db=3)
    assert list(as_gateway.scan_iter(match="rampart:ratelimit:*"))
    with pytest.raises(redis.exceptions.NoPermissionError):
        as_gateway.get("celery")  # any key outside rampart:ratelimit:*
    probe = client("probe", secrets["rampart-redis-probe"]["password"])
    assert probe.ping()
    with pytest.raises(redis.exceptions.NoPermissionError):
        probe.keys("*")
    as_worker = client("worker", worker)
    assert as_worker.ping() and as_worker.dbsize() >= 0
    with pytest.raises(redis.exceptions.NoPermissionError):
        as_worker.flushall()
    with pytest.raises(redis.exceptions.NoPermissionError):
        as_worker.config_get("requirepass")


def test_stopping_triton_degrades_rerank_then_recovers(loaded: Deployed) -> None:
    """docs/stack.md: Triton down -> 200, fused order, ``degraded: ["rerank"]``; back -> not degraded."""
    pod = loaded.adapted.bundle("rampart-triton").pods[0]
    query = {"query": "when are travel expenses reimbursed, asked while triton is down", "top_k": 3}
    dp.podman("pod", "stop", "-t", "5", pod)
    try:
        with loaded.client() as c:
            started = time.monotonic()
            r = c.post("/v1/search", json=query, headers=auth(loaded.keys["alice"]))
            loaded.timings["degraded_search_s"] = round(time.monotonic() - started, 2)
            assert r.status_code == 200, r.text
            assert "rerank" in r.json()["degraded"], r.json()
            assert ids(r.json())[0] == "expenses", r.json()  # still the right answer, flagged
    finally:
        dp.podman("pod", "start", pod)
    with loaded.client() as c:
        deadline = time.monotonic() + 180
        n = 0
        while True:
            n += 1
            q = {"query": f"when are travel expenses reimbursed, after triton came back {n}", "top_k": 3}
            r = c.post("/v1/search", json=q, headers=auth(loaded.keys["alice"]))
            if r.status_code == 200 and r.json()["degraded"] == []:
                break
            assert time.monotonic() < deadline, r.text
            time.sleep(2.0)
        assert ids(r.json())[0] == "expenses", r.json()


def test_write_timings(loaded: Deployed) -> None:
    """Last: the measured start-up and request figures, for docs/deploy.md."""
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(loaded.timings, indent=2) + "\n")
    assert loaded.timings["all_stages_ready_after_play_s"] > 0
