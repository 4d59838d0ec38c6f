"""The orchestrator's HTTP face (FastAPI), over any backend: a Serve handle or the in-process service.

Users authenticate at the gateway, which sends the principal in the body; so when a ``token`` is
configured (``remote.internal_token``; the stack always sets one) every call but ``/healthz`` must
carry it in ``x-rampart-internal-token``: whoever can reach this port cannot pose as a user.
Errors are ``{code, message, details}`` with the gateway's status mapping. Each request continues
the caller's trace (W3C ``traceparent``).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.api.schemas import AnswerResponse, ErrorBody, SearchResponse
from services.common.errors import ErrorCode, RampartError
from services.common.http_errors import error_response, invalid_request, routing_error_response
from services.common.internal_auth import INTERNAL_TOKEN_HEADER
from services.common.otel import instrument_fastapi
from services.orchestrator.serving.messages import PipelineAnswerRequest, PipelineReply, PipelineSearchRequest
from services.orchestrator.serving.pipeline_service import PipelineService

log = logging.getLogger(__name__)

ERRORS: dict[int | str, dict[str, Any]] = {c: {"model": ErrorBody} for c in (400, 403, 413, 500, 503)}


class OrchestratorBackend(Protocol):
    async def search(self, call: PipelineSearchRequest) -> PipelineReply: ...

    async def answer(self, call: PipelineAnswerRequest) -> PipelineReply: ...

    async def readiness(self) -> dict[str, Any]:
        """Raise ``RampartError`` when the pipeline cannot serve."""
        ...


class InProcessBackend:
    """The embedded mode: the service in this process, its blocking work off the event loop."""

    def __init__(self, service: PipelineService) -> None:
        self.service = service

    async def search(self, call: PipelineSearchRequest) -> PipelineReply:
        return await run_in_threadpool(self.service.reply, call)

    async def answer(self, call: PipelineAnswerRequest) -> PipelineReply:
        return await run_in_threadpool(self.service.reply, call)

    async def readiness(self) -> dict[str, Any]:
        await run_in_threadpool(self.service.check_health)
        return await run_in_threadpool(self.service.readiness)


def create_orchestrator_app(backend: OrchestratorBackend, *, token: str | None = None) -> FastAPI:
    app = FastAPI(
        title="Rampart orchestrator",
        version="0.1.0",
        description="Internal: called by the gateway, which authenticates and passes the principal.",
    )
    expected = token.encode() if token else None

    @app.middleware("http")
    async def internal_token(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        if expected is None or request.url.path == "/healthz":
            return await call_next(request)
        given = request.headers.get(INTERNAL_TOKEN_HEADER, "").encode()
        if hmac.compare_digest(given, expected):
            return await call_next(request)
        return error_response(
            RampartError(
                ErrorCode.UNAUTHENTICATED,
                f"missing or wrong {INTERNAL_TOKEN_HEADER}: only the gateway (remote.internal_token) may "
                "call the orchestrator",
            )
        )

    @app.exception_handler(RampartError)
    async def rampart_error(request: Request, exc: RampartError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        return error_response(invalid_request(exc))

    @app.exception_handler(StarletteHTTPException)
    async def routing_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return routing_error_response(exc, request.method, request.url.path)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error in the orchestrator ingress")
        return error_response(
            RampartError(ErrorCode.INTERNAL, "internal error in the orchestrator; see its logs")
        )

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """Liveness of this ingress."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], responses=ERRORS)
    async def readyz() -> dict[str, Any]:
        """Readiness of the pipeline behind it (index open, in-process models ready)."""
        return await backend.readiness()

    @app.post("/v1/search", tags=["search"], response_model=SearchResponse, responses=ERRORS)
    async def search(call: PipelineSearchRequest) -> SearchResponse:
        """Search as the given principal (tenant + ACL filtered inside the index)."""
        return (await backend.search(call)).unwrap()

    @app.post("/v1/answer", tags=["search"], response_model=AnswerResponse, responses=ERRORS)
    async def answer(call: PipelineAnswerRequest) -> AnswerResponse:
        """Answer as the given principal, with citations (docs/orchestration.md)."""
        return (await backend.answer(call)).unwrap_answer()

    instrument_fastapi(app)  # a server span per request, continuing the gateway's traceparent
    return app
