"""The gateway's reading of what the orchestrator's HTTP ingress answers, over real loopback HTTP.

Ray Serve's proxy answers 404 without a body while the application (re)deploys (measured by
``rampart bench faults``: 16 such answers in one orchestrator restart), and 5xx while a replica is
gone. Neither is a verdict on the request: the gateway must say 503 ``unavailable``, never 400 or
404, so clients retry instead of changing a valid request. An answer with the ingress's own error
body keeps its status and code.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from services.api.schemas import SearchRequest
from services.common.config import RemoteSettings
from services.common.errors import ErrorCode
from services.common.types import Principal
from services.gateway.backends import HttpOrchestrator
from services.orchestrator.serving.messages import PipelineReply, PipelineSearchRequest

pytestmark = pytest.mark.integration

ANSWERS: dict[str, tuple[int, bytes]] = {}


class _Proxy(BaseHTTPRequestHandler):
    """Answers each path with the status and body the test set for it."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        status, body = ANSWERS[self.path]
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture()
def proxy() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Proxy)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _search(url: str) -> PipelineReply:
    async def call() -> PipelineReply:
        orchestrator = HttpOrchestrator(RemoteSettings(orchestrator_url=url))
        try:
            principal = Principal(tenant="acme", user="alice")
            call = PipelineSearchRequest(principal=principal, request=SearchRequest(query="vpn"))
            return await orchestrator.search(call)
        finally:
            await orchestrator.aclose()

    return asyncio.run(call())


@pytest.mark.parametrize("status", [404, 502, 503, 500])
def test_a_bodyless_proxy_answer_is_unavailable_whatever_its_status(proxy: str, status: int) -> None:
    ANSWERS["/v1/search"] = (status, b"")
    reply = _search(proxy)
    assert reply.status == 503 and reply.error is not None
    assert reply.error.code == ErrorCode.UNAVAILABLE.value
    assert f"HTTP {status} without an error body" in reply.error.message and "retry" in reply.error.message
    assert reply.error.details == {"stage": "orchestrator", "upstream_status": status}


def test_the_ingress_error_body_keeps_its_status_and_code(proxy: str) -> None:
    body = {"code": "invalid_argument", "message": "query is blank", "details": {"field": "query"}}
    ANSWERS["/v1/search"] = (400, json.dumps(body).encode())
    reply = _search(proxy)
    assert reply.status == 400 and reply.error is not None
    assert reply.error.model_dump() == body
