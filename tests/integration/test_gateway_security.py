"""The gateway's security controls on a real runtime (issue 36, points 2-4): the body limit on the
stream through a real uvicorn socket, rate limits per address, key and tenant (in-process and in a real
redis-server shared by two gateway instances), readiness without details, OIDC bearer tokens against
a JWKS file and a JWKS served over loopback HTTP, the write ACL, provenance from the key, and the audit
log."""

from __future__ import annotations

import contextlib
import dataclasses
import http.server
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
import uvicorn
from cryptography.hazmat.primitives.asymmetric import rsa
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import SecretStr

from services.common.config import RemoteSettings
from services.common.errors import RampartError
from services.common.net import free_port
from services.common.types import Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.app import create_app
from services.gateway.backends import GatewayBackends
from services.gateway.config import AuditSettings, OidcSettings
from services.orchestrator.runtime import Runtime
from tests.integration.redis_server import RedisServer

HR_DOC = {"id": "bands", "title": "Salary bands", "acl": {"groups": ["hr"]}, "text": "L3 earns 120k to 140k."}
ALL_DOC = {
    "id": "leave",
    "title": "Leave",
    "acl": {"groups": ["*"]},
    "text": "Everyone gets 25 vacation days.",
}


def app_with(runtime: Runtime, keys: ApiKeyStore, **gateway: Any) -> FastAPI:
    """The real app over ``runtime`` with some gateway settings changed (validated as a whole)."""
    backends = GatewayBackends.embedded(runtime)
    changed = type(runtime.settings.gateway).model_validate(
        {**runtime.settings.gateway.model_dump(), **gateway}
    )
    return create_app(
        dataclasses.replace(backends, settings=runtime.settings.model_copy(update={"gateway": changed})), keys
    )


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@contextlib.contextmanager
def served(app: FastAPI) -> Iterator[int]:
    """``app`` under a real uvicorn on a free loopback port (the server `rampart serve` runs)."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 response (status, headers, body by content-length) from a raw socket."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"connection closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split()[1]), headers, body


# ---- body limit on the stream -------------------------------------------------------------------


def test_chunked_body_over_the_limit_is_refused_before_it_is_read(runtime: Runtime, tmp_path: Path) -> None:
    """A chunked upload (no content-length) past max_body_bytes gets 413 while the client is still
    sending: the server answers after ~2 KiB of a body that never ends, so it cannot have read it all."""
    keys = ApiKeyStore(tmp_path / "k.json")
    key, _ = keys.create(Principal(tenant="acme", user="w", scopes=["search", "ingest"]))
    with (
        served(app_with(runtime, keys, max_body_bytes=1024)) as port,
        socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
    ):
        sock.sendall(
            b"POST /v1/documents HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/json\r\nAuthorization: Bearer " + key.encode() + b"\r\n\r\n"
        )
        for _ in range(4):  # 4 x 512 bytes, and no terminating zero-length chunk: the body never ends
            sock.sendall(b"200\r\n" + b"x" * 512 + b"\r\n")
        status, headers, body = read_response(sock)
    assert status == 413, body
    error = json.loads(body)
    assert error["code"] == "payload_too_large" and "1024" in error["message"]
    assert "gateway.max_body_bytes" in error["message"] and headers["connection"] == "close"
    assert headers["x-request-id"]  # the request middleware still saw it


def test_chunked_body_within_the_limit_is_served(runtime: Runtime, tmp_path: Path) -> None:
    keys = ApiKeyStore(tmp_path / "k.json")
    key, _ = keys.create(Principal(tenant="acme", user="w", scopes=["search"]))
    body = json.dumps({"query": "vacation days", "rerank": {"enabled": False}}).encode()
    with (
        served(app_with(runtime, keys, max_body_bytes=1024)) as port,
        socket.create_connection(("127.0.0.1", port), timeout=60) as sock,
    ):
        half = len(body) // 2
        sock.sendall(
            b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
            b"Content-Type: application/json\r\nAuthorization: Bearer "
            + key.encode()
            + b"\r\n\r\n"
            + f"{half:x}\r\n".encode()
            + body[:half]
            + b"\r\n"
            + f"{len(body) - half:x}\r\n".encode()
            + body[half:]
            + b"\r\n0\r\n\r\n"
        )
        status, _, answer = read_response(sock)
    assert status == 200, answer
    assert json.loads(answer)["query"] == "vacation days"


def test_content_length_over_the_limit_is_refused_without_reading(runtime: Runtime, tmp_path: Path) -> None:
    keys = ApiKeyStore(tmp_path / "k.json")
    with (
        served(app_with(runtime, keys, max_body_bytes=1024)) as port,
        socket.create_connection(("127.0.0.1", port), timeout=10) as sock,
    ):
        sock.sendall(b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 999999999\r\n\r\n{")
        status, _, body = read_response(sock)
    assert status == 413 and "999999999 bytes" in json.loads(body)["message"]


# ---- rate limits --------------------------------------------------------------------------------


def test_failed_authentication_is_limited_per_address(runtime: Runtime, tmp_path: Path) -> None:
    """Bad keys from one address: 401 while its budget lasts, then 429; a valid key still works."""
    keys = ApiKeyStore(tmp_path / "k.json")
    good, _ = keys.create(Principal(tenant="acme", user="a"))
    with TestClient(app_with(runtime, keys, anonymous_rate_limit_per_minute=3)) as client:
        codes = [
            client.post("/v1/search", json={"query": "x"}, headers=auth("rk_0000_guess")).status_code
            for _ in range(5)
        ]
        assert codes == [401, 401, 401, 429, 429]
        limited = client.post("/v1/search", json={"query": "x"}).json()
        assert (
            limited["code"] == "rate_limited" and "unauthenticated requests/minute from" in limited["message"]
        )
        ok = client.post("/v1/search", json={"query": "x", "rerank": {"enabled": False}}, headers=auth(good))
        assert ok.status_code == 200
        assert client.get("/readyz").status_code == 429  # probes share the address's budget
        assert client.get("/healthz").status_code == 200  # liveness costs nothing: never limited


def test_tenant_limit_spans_its_keys(runtime: Runtime, tmp_path: Path) -> None:
    keys = ApiKeyStore(tmp_path / "k.json")
    a, _ = keys.create(Principal(tenant="acme", user="a"))
    b, _ = keys.create(Principal(tenant="acme", user="b"))
    other, _ = keys.create(Principal(tenant="globex", user="c"))
    quick = {"query": "x", "rerank": {"enabled": False}, "factcheck": {"enabled": False}}
    with TestClient(app_with(runtime, keys, tenant_rate_limit_per_minute=3)) as client:
        codes = [client.post("/v1/search", json=quick, headers=auth(k)).status_code for k in (a, b, a, b)]
        assert codes == [200, 200, 200, 429]
        assert "tenant 'acme'" in client.post("/v1/search", json=quick, headers=auth(b)).json()["message"]
        assert client.post("/v1/search", json=quick, headers=auth(other)).status_code == 200


def test_redis_limits_are_shared_by_replicas_and_weighted_by_cost(
    runtime: Runtime, tmp_path: Path, start_redis: Callable[[], RedisServer]
) -> None:
    """Two gateway instances on one real redis-server draw from one budget per key; an answer takes
    4 units, a search 1. Redis going away fails requests (503 naming it), it does not open the gate."""
    redis = start_redis()
    keys = ApiKeyStore(tmp_path / "k.json")
    key, _ = keys.create(Principal(tenant="acme", user="a"))
    shared = {"rate_limit_per_minute": 6, "rate_limit_redis_url": redis.url(3)}
    quick = {"query": "x", "rerank": {"enabled": False}, "factcheck": {"enabled": False}}
    with (
        TestClient(app_with(runtime, keys, **shared)) as one,
        TestClient(app_with(runtime, keys, **shared)) as two,
    ):
        assert (
            one.post("/v1/answer", json={"query": "how many vacation days"}, headers=auth(key)).status_code
            == 200
        )
        assert two.post("/v1/search", json=quick, headers=auth(key)).status_code == 200
        assert one.post("/v1/search", json=quick, headers=auth(key)).status_code == 200
        refused = two.post("/v1/search", json=quick, headers=auth(key))  # 4 + 1 + 1 = 6 units spent
        assert refused.status_code == 429 and int(refused.headers["retry-after"]) >= 1
        assert "this request costs 1" in refused.json()["message"]
        assert redis.client(3).keys("rampart:ratelimit:*")  # the buckets live in Redis
        redis.stop()
        down = one.post("/v1/search", json=quick, headers=auth(key))
        assert down.status_code == 503 and f"127.0.0.1:{redis.port}" in down.json()["message"]


def test_unreachable_redis_fails_the_start(runtime: Runtime, tmp_path: Path) -> None:
    app = app_with(
        runtime, ApiKeyStore(tmp_path / "k.json"), rate_limit_redis_url=f"redis://127.0.0.1:{free_port()}/0"
    )
    refused = pytest.raises(
        RampartError, match=r"rate-limit Redis at redis://127\.0\.0\.1:\d+/0 is not answering"
    )
    with refused, TestClient(app):
        raise AssertionError("the gateway started against a Redis nobody runs")


# ---- readiness -----------------------------------------------------------------------------------


def test_readyz_says_only_ready_and_details_need_auth(runtime: Runtime, tmp_path: Path) -> None:
    keys = ApiKeyStore(tmp_path / "k.json")
    user, _ = keys.create(Principal(tenant="acme", user="a"))
    admin, _ = keys.create(Principal(tenant="acme", user="ops", scopes=["admin"]))
    backends = GatewayBackends.embedded(runtime)
    settings = runtime.settings.model_copy(
        update={"remote": RemoteSettings(internal_token=SecretStr("s3cret-token"))}
    )
    with TestClient(create_app(dataclasses.replace(backends, settings=settings), keys)) as client:
        assert client.get("/readyz").json() == {"status": "ready"}
        assert client.get("/readyz", headers={"x-rampart-internal-token": "wrong"}).json() == {
            "status": "ready"
        }
        assert client.get("/v1/readiness").status_code == 401
        assert client.get("/v1/readiness", headers=auth(user)).status_code == 403
        details = client.get("/v1/readiness", headers=auth(admin)).json()
        assert details["ingest"] == "ready" and "index" in details
        stack = client.get("/readyz", headers={"x-rampart-internal-token": "s3cret-token"}).json()
        assert stack["ingest"] == "ready"  # the stack's readiness wait proves itself with the token
        spec = client.get("/openapi.json").json()
        ready_schema = spec["paths"]["/readyz"]["get"]["responses"]["200"]["content"]["application/json"][
            "schema"
        ]
        assert ready_schema["$ref"].endswith("/Readiness")


def test_readyz_details_for_local_callers_only_when_allowed(runtime: Runtime, tmp_path: Path) -> None:
    """Over a real socket from 127.0.0.1, by default a local caller gets one bit like everyone else;
    with readiness_details_from_loopback on, the stages are shown."""
    keys = ApiKeyStore(tmp_path / "k.json")
    with served(app_with(runtime, keys)) as port:
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=30).json() == {"status": "ready"}
    with served(app_with(runtime, keys, readiness_details_from_loopback=True)) as port:
        assert httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=30).json()["ingest"] == "ready"


# ---- write ACL and provenance --------------------------------------------------------------------


def test_write_acl_two_ingest_keys_of_one_tenant(runtime: Runtime, tmp_path: Path) -> None:
    """eng's ingest key may not replace, delete or read the status of HR's document: 404, as if it
    did not exist; the refusals are audited. HR's key may, and so may a tenant admin's."""
    keys = ApiKeyStore(tmp_path / "k.json")
    hr, _ = keys.create(Principal(tenant="acme", user="hr-sync", groups=["hr"], scopes=["search", "ingest"]))
    eng, _ = keys.create(
        Principal(tenant="acme", user="eng-sync", groups=["eng"], scopes=["search", "ingest"])
    )
    admin, _ = keys.create(Principal(tenant="acme", user="root", scopes=["admin"]))
    audit = tmp_path / "audit.jsonl"
    with TestClient(app_with(runtime, keys, audit=AuditSettings(path=audit))) as client:
        assert (
            client.post("/v1/documents", json={"documents": [HR_DOC]}, headers=auth(hr)).json()["indexed"]
            == 1
        )
        hijack = {**HR_DOC, "version": 2, "acl": {"groups": ["eng"]}, "text": "L3 earns 10k."}
        refused = client.post("/v1/documents", json={"documents": [ALL_DOC, hijack]}, headers=auth(eng))
        assert refused.status_code == 404 and "'bands'" in refused.json()["message"]
        assert client.get("/v1/documents/bands/status", headers=auth(eng)).status_code == 404
        assert client.delete("/v1/documents/bands", headers=auth(eng)).status_code == 404
        assert (
            client.get("/v1/documents/leave/status", headers=auth(eng)).status_code == 404
        )  # batch refused whole
        mine = client.get("/v1/documents/bands/status", headers=auth(hr)).json()
        assert mine["version"] == 1 and mine["state"] == "indexed" and "readers" not in mine
        status_schema = client.get("/openapi.json").json()["components"]["schemas"]["DocumentStatusOut"]
        assert "readers" not in status_schema["properties"]  # the OpenAPI says what is returned
        found = client.post(
            "/v1/search", json={"query": "L3 earns", "rerank": {"enabled": False}}, headers=auth(hr)
        ).json()
        assert "L3 earns 120k to 140k." in [r["text"] for r in found["results"]]
        # a document eng may read it may replace and delete
        assert (
            client.post("/v1/documents", json={"documents": [ALL_DOC]}, headers=auth(eng)).json()["indexed"]
            == 1
        )
        assert client.delete("/v1/documents/leave", headers=auth(eng)).json()["deleted"] is True
        assert client.get("/v1/documents/bands/status", headers=auth(admin)).json()["version"] == 1
        assert client.delete("/v1/documents/bands", headers=auth(admin)).json()["deleted"] is True
    events = [json.loads(line) for line in audit.read_text().splitlines()]
    denied = [(e["action"], e["doc_ids"]) for e in events if e["outcome"] == "denied"]
    assert denied == [("ingest", ["bands"]), ("status", ["bands"]), ("delete", ["bands"])]
    assert all(e["user"] == "eng-sync" for e in events if e["outcome"] == "denied")


def test_trust_and_source_come_from_the_key(runtime: Runtime, tmp_path: Path) -> None:
    keys = ApiKeyStore(tmp_path / "k.json")
    wiki, _ = keys.create(
        Principal(tenant="acme", user="wiki-sync", scopes=["ingest"]),
        source="wiki://acme/",
        trust="untrusted",
    )
    plain, _ = keys.create(Principal(tenant="acme", user="ops", scopes=["ingest"]))
    with TestClient(app_with(runtime, keys)) as client:
        forged = {**ALL_DOC, "metadata": {"trust": ""}}
        r = client.post("/v1/documents", json={"documents": [forged]}, headers=auth(plain))
        assert r.status_code == 400 and "trust comes from the key" in r.json()["message"]
        outside = {**ALL_DOC, "source": "https://intranet.acme/policies/leave"}
        r = client.post("/v1/documents", json={"documents": [outside]}, headers=auth(wiki))
        assert (
            r.status_code == 403
            and "outside this key's source namespace 'wiki://acme/'" in r.json()["message"]
        )
        under = {**ALL_DOC, "id": "w1", "source": "wiki://acme/pages/leave"}
        assert (
            client.post(
                "/v1/documents", json={"documents": [under, {**ALL_DOC, "id": "w2"}]}, headers=auth(wiki)
            ).status_code
            == 200
        )
        spec = client.get("/openapi.json").json()["components"]["schemas"]["DocumentIn"]["properties"]
        assert spec["metadata"]["not"] == {"required": ["trust"]}
    stored = {c.doc_id: c for batch in runtime.index.store.iter_all_chunks() for _, c, *_ in batch}
    assert (stored["w1"].source, stored["w1"].trust) == ("wiki://acme/pages/leave", "untrusted")
    assert (stored["w2"].source, stored["w2"].trust) == ("wiki://acme/", "untrusted")


def test_a_source_namespace_holds_at_a_boundary() -> None:
    """A namespace written without its final '/' still stops at the host or path segment's end."""
    from services.gateway.routes_documents import under_namespace

    ns = "https://wiki.acme.example"
    assert under_namespace(ns, ns) and under_namespace(ns + "/pages/leave", ns)
    assert not under_namespace("https://wiki.acme.example.evil/pages", ns)
    assert not under_namespace("https://wiki.acme.examples/x", ns)
    assert under_namespace("wiki://acme/pages", "wiki://acme/") and not under_namespace(
        "wiki://acmex/p", "wiki://acme/"
    )
    assert under_namespace("mail:inbox/1", "mail:") and not under_namespace("mailbox:1", "mail")


# ---- audit ---------------------------------------------------------------------------------------


def test_audit_log_records_who_read_what_without_text(runtime: Runtime, tmp_path: Path) -> None:
    keys = ApiKeyStore(tmp_path / "k.json")
    writer, wrec = keys.create(
        Principal(tenant="acme", user="ops", groups=["hr"], scopes=["search", "ingest"])
    )
    audit = tmp_path / "audit" / "events.jsonl"
    quick = {"query": "salary bands L3", "rerank": {"enabled": False}}
    with TestClient(app_with(runtime, keys, audit=AuditSettings(path=audit))) as client:
        sourced = {**HR_DOC, "source": "hr://bands"}
        client.post("/v1/documents", json={"documents": [sourced, ALL_DOC]}, headers=auth(writer))
        found = client.post("/v1/search", json=quick, headers=auth(writer)).json()
        assert client.delete("/v1/documents/leave", headers=auth(writer)).status_code == 200
    assert oct(audit.stat().st_mode & 0o777) == "0o600"
    text = audit.read_text()
    assert "salary bands L3" not in text and "120k" not in text and writer not in text
    ingest, search, deleted = (json.loads(line) for line in text.splitlines())
    assert ingest["action"] == "ingest" and ingest["doc_ids"] == ["bands", "leave"]
    assert ingest["detail"] == "indexed=2 unchanged=0 failed=0" and ingest["sources"] == ["hr://bands"]
    assert (deleted["action"], deleted["outcome"], deleted["doc_ids"]) == ("delete", "ok", ["leave"])
    assert ingest["credential"] == f"key:{wrec.id}" and ingest["client"] == "testclient"
    assert search["action"] == "search" and search["tenant"] == "acme" and search["user"] == "ops"
    assert search["doc_ids"] == list(dict.fromkeys(r["doc_id"] for r in found["results"]))
    assert (
        search["chunk_ids"] == [r["chunk_id"] for r in found["results"]]
        and search["request_id"] == found["request_id"]
    )
    assert len(search["query_sha256"]) == 64 and "query" not in search

    with TestClient(app_with(runtime, keys, audit=AuditSettings(path=audit, include_text=True))) as client:
        client.post("/v1/search", json=quick, headers=auth(writer))
        guessed = f"rk_{wrec.id}_not-the-secret"
        assert client.post("/v1/search", json=quick, headers=auth(guessed)).status_code == 401
    *_, searched, failed = (json.loads(line) for line in audit.read_text().splitlines())
    assert searched["query"] == "salary bands L3"
    assert (failed["action"], failed["outcome"], failed["credential"]) == (
        "authenticate",
        "denied",
        f"key:{wrec.id}",
    )
    assert failed["detail"] == "invalid or revoked API key" and "not-the-secret" not in audit.read_text()


# ---- OIDC ----------------------------------------------------------------------------------------

ISSUER = "https://idp.acme.example/"
AUDIENCE = "rampart"


class Idp:
    """A signing key pair and its JWKS, as an identity provider publishes it."""

    def __init__(self, kid: str = "k1") -> None:
        self.kid = kid
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key(), as_dict=True)
        self.jwks = {"keys": [{**public, "kid": kid, "use": "sig", "alg": "RS256"}]}

    def token(self, **claims: Any) -> str:
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": "alice", "iat": now, "exp": now + 300, **claims}
        return jwt.encode(body, self.private, algorithm="RS256", headers={"kid": self.kid})


@contextlib.contextmanager
def jwks_server(idp: Idp, delay_s: float = 0.0) -> Iterator[tuple[str, list[str]]]:
    """The JWKS over a real HTTP server on loopback (answering after ``delay_s``); yields its URL and
    the paths it was asked for. It serves ``idp.jwks`` as it is at each request (rotation)."""
    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            time.sleep(delay_s)
            body = json.dumps(idp.jwks).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads ``hits``, not stderr."""

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/jwks.json", hits
    finally:
        server.shutdown()
        server.server_close()


def test_oidc_tokens_from_a_jwks_url(runtime: Runtime, tmp_path: Path) -> None:
    """Claims map to tenant, user and groups (the ACL follows them); the JWKS is fetched once and
    cached; a wrong audience, issuer, an expired token and HS256 are refused, each saying why."""
    idp = Idp()
    keys = ApiKeyStore(tmp_path / "k.json")
    writer, _ = keys.create(Principal(tenant="acme", user="ops", scopes=["ingest"]))
    with jwks_server(idp) as (url, hits):
        oidc = OidcSettings(
            issuer=ISSUER, audience=AUDIENCE, jwks_url=url, tenant_claim="org.id", groups_claim="groups"
        )
        with TestClient(app_with(runtime, keys, oidc=oidc)) as client:
            client.post("/v1/documents", json={"documents": [HR_DOC, ALL_DOC]}, headers=auth(writer))

            def search(token: str) -> Any:
                return client.post(
                    "/v1/search",
                    json={"query": "vacation days L3 earns", "rerank": {"enabled": False}},
                    headers=auth(token),
                )

            hr = search(idp.token(org={"id": "acme"}, groups=["hr"]))
            eng = search(idp.token(org={"id": "acme"}, groups=["eng"]))
            assert {r["doc_id"] for r in hr.json()["results"]} == {"bands", "leave"}
            assert {r["doc_id"] for r in eng.json()["results"]} == {"leave"}
            assert hits == ["/jwks.json"]  # fetched once, then cached

            def refused(token: str) -> str:
                r = search(token)
                assert r.status_code == 401, r.text
                return str(r.json()["message"])

            assert "audience is not 'rampart'" in refused(idp.token(org={"id": "acme"}, aud="other-app"))
            assert "issuer is not" in refused(idp.token(org={"id": "acme"}, iss="https://evil.example/"))
            assert "expired" in refused(idp.token(org={"id": "acme"}, exp=int(time.time()) - 120))
            assert "no tenant in claim 'org.id'" in refused(idp.token())
            hs = jwt.encode(
                {"iss": ISSUER, "aud": AUDIENCE, "sub": "x", "exp": time.time() + 60}, "k" * 32, "HS256"
            )
            assert "algorithm 'HS256' is not accepted" in refused(hs)
            stranger = Idp(kid="k1")  # same kid, another key: the signature fails
            assert "Signature verification failed" in refused(stranger.token(org={"id": "acme"}))
            assert "scope" in search(idp.token(org={"id": "acme"}, scope="ingest")).json()["message"]


def test_oidc_jwks_file_and_rotation(runtime: Runtime, tmp_path: Path) -> None:
    """A JWKS file is re-read when the provider's keys change on disk (key rotation)."""
    old, new = Idp("k1"), Idp("k2")
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(old.jwks))
    oidc = OidcSettings(issuer=ISSUER, audience=AUDIENCE, jwks_file=jwks, default_tenant="acme")
    with TestClient(app_with(runtime, ApiKeyStore(tmp_path / "k.json"), oidc=oidc)) as client:
        body = {"query": "x", "rerank": {"enabled": False}}
        assert client.post("/v1/search", json=body, headers=auth(old.token())).status_code == 200
        assert (
            "no key 'k2'" in client.post("/v1/search", json=body, headers=auth(new.token())).json()["message"]
        )
        jwks.write_text(json.dumps({"keys": old.jwks["keys"] + new.jwks["keys"]}))
        assert client.post("/v1/search", json=body, headers=auth(new.token())).status_code == 200


def test_oidc_jwks_url_rotation_and_timeout(runtime: Runtime, tmp_path: Path) -> None:
    """A token with a kid the cached JWKS lacks fetches it again (the provider rotated); a provider that
    does not answer within jwks_timeout_s is a 503 naming the URL, not a hung request."""
    idp = Idp("k1")
    body = {"query": "x", "rerank": {"enabled": False}}
    with jwks_server(idp) as (url, hits):
        oidc = OidcSettings(
            issuer=ISSUER, audience=AUDIENCE, jwks_url=url, default_tenant="acme", jwks_refetch_s=0.0
        )
        with TestClient(app_with(runtime, ApiKeyStore(tmp_path / "k.json"), oidc=oidc)) as client:
            assert client.post("/v1/search", json=body, headers=auth(idp.token())).status_code == 200
            rotated = Idp("k2")
            idp.jwks = {"keys": idp.jwks["keys"] + rotated.jwks["keys"]}  # the provider publishes k2
            assert client.post("/v1/search", json=body, headers=auth(rotated.token())).status_code == 200
            assert len(hits) == 2
    slow = Idp("k1")
    with jwks_server(slow, delay_s=3.0) as (url, _):
        oidc = OidcSettings(
            issuer=ISSUER, audience=AUDIENCE, jwks_url=url, default_tenant="acme", jwks_timeout_s=0.3
        )
        with TestClient(app_with(runtime, ApiKeyStore(tmp_path / "k.json"), oidc=oidc)) as client:
            started = time.monotonic()
            r = client.post("/v1/search", json=body, headers=auth(slow.token()))
            assert time.monotonic() - started < 2.5
            assert r.status_code == 503 and f"could not fetch the JWKS from {url}" in r.json()["message"]


def test_oidc_settings_name_what_is_missing() -> None:
    with pytest.raises(ValueError, match="RAMPART_GATEWAY__OIDC__AUDIENCE"):
        OidcSettings(issuer=ISSUER, jwks_url="http://127.0.0.1/jwks")
    with pytest.raises(ValueError, match="exactly one of jwks_file or jwks_url"):
        OidcSettings(issuer=ISSUER, audience=AUDIENCE)
    with pytest.raises(ValueError, match=r"\['HS256'\] are refused"):
        OidcSettings(issuer=ISSUER, audience=AUDIENCE, jwks_url="http://x/", algorithms=["RS256", "HS256"])
