"""AWS SigV4 on the OpenSearch client (``opensearch.aws_sigv4``): every request that leaves the
client is signed with credentials from the standard AWS chain, for the configured region and service,
over the exact (gzip-compressed) body it sends. A loopback HTTP server stands in for the domain and
records what arrives; no AWS endpoint is reachable here, so no signature was checked by AWS itself."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from services.common.errors import ErrorCode, RampartError
from services.retrieval.config import OpenSearchSettings
from services.retrieval.opensearch_transport import connect

INFO = {"name": "fake", "cluster_name": "fake", "version": {"number": "2.19.1", "distribution": "opensearch"}}


class Recorder(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str, dict[str, str], bytes]]] = []  # headers by lower-case name

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Recorder.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body))
        reply = INFO if self.path == "/" else {"took": 1, "timed_out": False, "hits": {"hits": []}}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _answer  # noqa: N815

    def log_message(self, *args: Any) -> None:
        """Quiet: the test reads the recorded requests, not the server's access log."""


@pytest.fixture()
def domain() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    Recorder.seen.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture()
def aws_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """An AWS chain that sees only what the test sets (no ~/.aws, no instance metadata)."""
    for name in ("AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
    return monkeypatch


def signed_parts(headers: dict[str, str]) -> dict[str, str]:
    auth = headers["authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 "), auth
    return dict(part.strip().split("=", 1) for part in auth.removeprefix("AWS4-HMAC-SHA256 ").split(","))


def test_every_request_is_signed_over_the_body_it_sends(domain: str, aws_env: pytest.MonkeyPatch) -> None:
    aws_env.setenv("AWS_SESSION_TOKEN", "session-token-1")
    t = connect(OpenSearchSettings(url=domain, aws_sigv4=True, aws_region="eu-west-1"))
    try:
        t.call("connect", t.client.info, idempotent=True)
        t.search("x-chunks", {"query": {"match_all": {}}}, "search")
    finally:
        t.close()
    (get, search) = Recorder.seen
    for method, _path, headers, body in (get, search):
        parts = signed_parts(headers)
        key, _day, region, service, end = parts["Credential"].split("/")
        assert (key, region, service, end) == ("AKIDEXAMPLE", "eu-west-1", "es", "aws4_request")
        signed = parts["SignedHeaders"].split(";")
        assert {"host", "x-amz-date", "x-amz-content-sha256", "x-amz-security-token"} <= set(signed)
        assert len(parts["Signature"]) == 64
        assert headers["x-amz-security-token"] == "session-token-1"
        # the payload hash signed is that of the bytes that arrived (gzip-compressed for a body)
        assert headers["x-amz-content-sha256"] == hashlib.sha256(body).hexdigest(), method
    assert search[0] == "POST" and search[2].get("content-encoding") == "gzip" and search[3]


def test_serverless_and_the_chain_region(domain: str, aws_env: pytest.MonkeyPatch) -> None:
    aws_env.setenv("AWS_DEFAULT_REGION", "us-east-2")
    t = connect(OpenSearchSettings(url=domain, aws_sigv4=True, aws_service="aoss"))
    try:
        t.call("connect", t.client.info, idempotent=True)
    finally:
        t.close()
    credential = signed_parts(Recorder.seen[0][2])["Credential"]
    assert credential.endswith("/us-east-2/aoss/aws4_request")


def test_bad_sigv4_settings_name_the_fix(domain: str, aws_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(RampartError, match="RAMPART_OPENSEARCH__AWS_REGION") as caught:
        connect(OpenSearchSettings(url=domain, aws_sigv4=True))
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    with pytest.raises(RampartError, match="unset the username") as caught:
        connect(OpenSearchSettings(url=domain, aws_sigv4=True, aws_region="eu-west-1", username="admin"))
    aws_env.delenv("AWS_ACCESS_KEY_ID")
    aws_env.delenv("AWS_SECRET_ACCESS_KEY")
    with pytest.raises(RampartError, match="found no credentials") as caught:
        connect(OpenSearchSettings(url=domain, aws_sigv4=True, aws_region="eu-west-1"))
    assert caught.value.code is ErrorCode.FAILED_PRECONDITION
    assert Recorder.seen == []  # nothing was sent unsigned
