"""The HTTP gateway (FastAPI): authentication, limits, errors as ``{code, message, details}``.

``create_app(backends, keys)`` takes already-built dependencies (:class:`GatewayBackends`: the pipeline
and ingest, in-process over a :class:`Runtime` or remote in the stack); nothing here reads the
environment or builds models.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Depends, FastAPI, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.api.schemas import (
    AnswerRequest,
    AnswerResponse,
    DeleteResponse,
    ErrorBody,
    FilteredHit,
    IngestRequest,
    IngestResponse,
    SearchHit,
    SearchRequest,
    SearchResponse,
)
from services.common import metrics as rampart_metrics
from services.common import telemetry
from services.common.errors import ErrorCode, RampartError
from services.common.http_errors import error_response, invalid_request, routing_error_response
from services.common.otel import current_trace_id, instrument_fastapi
from services.common.types import DocumentStatus, Principal
from services.gateway.api_keys import ApiKeyStore
from services.gateway.backends import GatewayBackends
from services.gateway.rate_limit import RateLimiter
from services.ingest.service import Outcome
from services.orchestrator.runtime import Runtime
from services.orchestrator.serving.messages import PipelineAnswerRequest, PipelineSearchRequest

log = logging.getLogger(__name__)

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 403, 404, 409, 413, 429, 503)
}


_REQUEST_ID = re.compile(r"[A-Za-z0-9._\-]{8,64}")


def create_app(runtime: Runtime | GatewayBackends, keys: ApiKeyStore) -> FastAPI:
    """The gateway over ``runtime`` (embedded) or any :class:`GatewayBackends` (e.g. the stack's)."""
    backends = runtime if isinstance(runtime, GatewayBackends) else GatewayBackends.embedded(runtime)
    settings = backends.settings.gateway
    limiter = RateLimiter(settings.rate_limit_per_minute)
    # process-wide metrics, one list for every service (services/common/metrics.py)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        await backends.aclose()

    # FastAPIOffline serves the Swagger UI and ReDoc assets from the package (FastAPI's default pulls
    # them from a CDN: /docs was blank on a machine without internet)
    app = FastAPIOffline(
        lifespan=lifespan,
        title="Rampart",
        version="0.1.0",
        description="Corruption-resistant enterprise search gateway. Authenticate with "
        "`Authorization: Bearer rk_…` (create keys with `rampart keys create`).",
    )

    @app.middleware("http")
    async def limits_and_ids(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        # A caller's id is kept only if it is a plain token: it ends up in logs and headers.
        given = request.headers.get("x-request-id", "")
        request.state.request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        telemetry.request_id.set(request.state.request_id)
        started = time.perf_counter()
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > settings.max_body_bytes):
            rampart_metrics.record_http_error(ErrorCode.PAYLOAD_TOO_LARGE)
            response: Response = error_response(
                RampartError(
                    ErrorCode.PAYLOAD_TOO_LARGE,
                    f"request body of {length} bytes exceeds the limit of {settings.max_body_bytes}; "
                    "send smaller batches",
                    limit=settings.max_body_bytes,
                )
            )
        else:
            response = await call_next(request)
        response.headers["x-request-id"] = request.state.request_id
        trace_id = current_trace_id()  # the request's server span (instrument_fastapi below)
        if trace_id:
            response.headers["x-trace-id"] = trace_id
        route = request.scope.get("route")
        rampart_metrics.record_http(
            getattr(route, "path", "unmatched"), response.status_code, time.perf_counter() - started
        )
        return response

    @app.exception_handler(RampartError)
    async def rampart_error(request: Request, exc: RampartError) -> JSONResponse:
        rampart_metrics.record_http_error(exc.code)
        headers = (
            {"retry-after": str(int(exc.details.get("retry_after_s", 1)) + 1)}
            if (exc.code is ErrorCode.RATE_LIMITED)
            else None
        )
        if exc.code is ErrorCode.UNAUTHENTICATED:
            headers = {"www-authenticate": "Bearer"}
        return error_response(exc, headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        rampart_metrics.record_http_error(ErrorCode.INVALID_ARGUMENT)
        return error_response(invalid_request(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return routing_error_response(exc, request.method, request.url.path)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", extra={"request_id": getattr(request.state, "request_id", "")})
        rampart_metrics.record_http_error(ErrorCode.INTERNAL)
        return error_response(
            RampartError(
                ErrorCode.INTERNAL, "internal error; the request id in x-request-id identifies it in the logs"
            )
        )

    def principal(request: Request) -> Principal:
        header = request.headers.get("authorization", "")
        key = header[7:].strip() if header.lower().startswith("bearer ") else request.headers.get("x-api-key")
        key_id, who = keys.authenticate(key)
        ok, wait = limiter.allow(key_id)
        if not ok:
            raise RampartError(
                ErrorCode.RATE_LIMITED,
                f"rate limit of {settings.rate_limit_per_minute} requests/minute exceeded; retry later",
                retry_after_s=round(wait, 2),
            )
        telemetry.tenant_id.set(who.tenant)
        return who

    def require(who: Principal, scope: str) -> None:
        if not who.can(scope):
            raise RampartError(
                ErrorCode.PERMISSION_DENIED,
                f"this API key lacks the '{scope}' scope; create a key with --scopes {scope}",
            )

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process is up."""
        return {"status": "ok"}

    @app.get("/readyz", tags=["ops"], responses={503: {"model": ErrorBody}})
    async def readyz() -> dict[str, Any]:
        """Readiness: the pipeline can serve (index open, models loaded; remote stages say ready or
        degraded) and ingest can take documents."""
        return await backends.readiness()

    @app.get("/metrics", tags=["ops"], response_class=PlainTextResponse)
    async def metrics() -> Response:
        body, content_type = rampart_metrics.exposition()
        return Response(body, media_type=content_type)

    @app.post("/v1/documents", tags=["documents"], response_model=IngestResponse, responses=ERROR_RESPONSES)
    async def ingest(body: IngestRequest, who: Principal = Depends(principal)) -> IngestResponse:
        """Index a batch of documents (idempotent by id + version). One result per document."""
        require(who, "ingest")
        if len(body.documents) > settings.max_batch_documents:
            raise RampartError(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"batch of {len(body.documents)} documents exceeds the limit of "
                f"{settings.max_batch_documents}; split it",
            )
        docs = []
        for d in body.documents:
            if d.tenant is not None and d.tenant != who.tenant:
                raise RampartError(
                    ErrorCode.PERMISSION_DENIED,
                    f"document {d.id!r} names tenant {d.tenant!r}, but this key belongs to tenant "
                    f"{who.tenant!r}; omit tenant or use a key of that tenant",
                )
            docs.append(d.model_copy(update={"tenant": who.tenant}))
        results = await run_in_threadpool(backends.ingestor.ingest, docs)
        return IngestResponse(
            results=results,
            indexed=sum(r.outcome is Outcome.INDEXED for r in results),
            unchanged=sum(r.outcome is Outcome.UNCHANGED for r in results),
            failed=sum(r.outcome in (Outcome.FAILED, Outcome.REJECTED) for r in results),
        )

    @app.get(
        "/v1/documents/{doc_id}/status",
        tags=["documents"],
        response_model=DocumentStatus,
        responses=ERROR_RESPONSES,
    )
    async def status(doc_id: str, who: Principal = Depends(principal)) -> DocumentStatus:
        """Ingest state of a document in the caller's tenant (needs the ingest scope)."""
        require(who, "ingest")
        st = await run_in_threadpool(backends.ingestor.status, who.tenant, doc_id)
        if st is None:
            raise RampartError(ErrorCode.NOT_FOUND, f"no document {doc_id!r} in tenant {who.tenant!r}")
        return st

    @app.delete(
        "/v1/documents/{doc_id}", tags=["documents"], response_model=DeleteResponse, responses=ERROR_RESPONSES
    )
    async def delete(doc_id: str, who: Principal = Depends(principal)) -> DeleteResponse:
        """Remove a document from every index of the caller's tenant."""
        require(who, "ingest")
        deleted = await run_in_threadpool(backends.ingestor.delete, who.tenant, doc_id)
        if not deleted:
            raise RampartError(ErrorCode.NOT_FOUND, f"no document {doc_id!r} in tenant {who.tenant!r}")
        return DeleteResponse(id=doc_id, deleted=True)

    @app.post("/v1/search", tags=["search"], response_model=SearchResponse, responses=ERROR_RESPONSES)
    async def search(
        body: SearchRequest, request: Request, who: Principal = Depends(principal)
    ) -> SearchResponse:
        """Hybrid search over the chunks the caller may read (tenant + ACL filtered inside the index);
        with ``adaptive: true``, the routed pipeline (docs/orchestration.md)."""
        require(who, "search")
        call = PipelineSearchRequest(principal=who, request=body, request_id=request.state.request_id)
        response = (await backends.orchestrator.search(call)).unwrap()
        count(response.degraded, response.results, response.filtered)
        return response

    @app.post("/v1/answer", tags=["search"], response_model=AnswerResponse, responses=ERROR_RESPONSES)
    async def answer(
        body: AnswerRequest, request: Request, who: Principal = Depends(principal)
    ) -> AnswerResponse:
        """Answer a question from the verified context, with citations (docs/orchestration.md).

        The adaptive pipeline routes the question, rewrites follow-ups (send the returned session_id
        with the next turn), chains multi-hop questions, grades and corrects the retrieval, fact-checks
        it and answers: extractively by default, with the configured LLM when there is one."""
        require(who, "search")
        call = PipelineAnswerRequest(principal=who, request=body, request_id=request.state.request_id)
        response = (await backends.orchestrator.answer(call)).unwrap_answer()
        count(response.degraded, response.results, response.filtered)
        return response

    def count(stages: list[str], hits: list[SearchHit], filtered: list[FilteredHit]) -> None:
        judged = [h.verdict.verdict.value for h in hits if h.verdict is not None]
        rampart_metrics.record_outcome(stages, [*judged, *(j.verdict.value for j in filtered)])

    instrument_fastapi(app)  # server span per request; /healthz, /readyz, /metrics excluded
    return app
