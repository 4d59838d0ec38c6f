"""The HTTP gateway (FastAPI): authentication, limits, errors as ``{code, message, details}``.

``create_app(backends, keys)`` takes already-built dependencies (:class:`GatewayBackends`: the pipeline
and ingest, in-process over a :class:`Runtime` or remote in the stack); nothing here reads the
environment or builds models. It wires the request middleware and the error handlers
(``errors.py``) and includes one router per area: ``routes_health.py`` (``/healthz``, ``/readyz``,
``/metrics``), ``routes_documents.py`` (``/v1/documents``), ``routes_search.py`` (``/v1/search``,
``/v1/answer``), ``routes_feedback.py`` (``/v1/feedback``); callers are identified by ``access.py``.

The controls in front of every route are built here from ``settings.gateway``, each by its one
factory: the streamed body limit (``body_limit.py``), the rate limiter (``rate_limit.build_limiter``:
in-process, or Redis shared by replicas), OIDC bearer tokens (``oidc.py``, when an issuer is set) and
the audit log (``audit.build_audit``), and the feedback store (``build_feedback_store``: SQLite in the
data folder, or Redis streams shared by replicas).
"""

from __future__ import annotations

import contextlib
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

from fastapi import FastAPI, Request, Response
from fastapi_offline import FastAPIOffline

from services.common import metrics as rampart_metrics
from services.common import telemetry
from services.common.otel import current_trace_id, instrument_fastapi
from services.common.types import REQUEST_ID_PATTERN
from services.gateway.access import Access
from services.gateway.api_keys import ApiKeyStore
from services.gateway.audit import build_audit
from services.gateway.backends import GatewayBackends
from services.gateway.body_limit import BodyLimit
from services.gateway.errors import install_error_handlers
from services.gateway.oidc import OidcVerifier
from services.gateway.openapi import install_openapi
from services.gateway.rate_limit import build_limiter
from services.gateway.routes_documents import documents_router
from services.gateway.routes_feedback import feedback_router
from services.gateway.routes_health import health_router
from services.gateway.routes_search import search_router
from services.learning.feedback_store import build_feedback_store
from services.orchestrator.runtime import Runtime

_REQUEST_ID = re.compile(REQUEST_ID_PATTERN)


def create_app(runtime: Runtime | GatewayBackends, keys: ApiKeyStore) -> FastAPI:
    """The gateway over ``runtime`` (embedded) or any :class:`GatewayBackends` (e.g. the stack's)."""
    backends = runtime if isinstance(runtime, GatewayBackends) else GatewayBackends.embedded(runtime)
    gw = backends.settings.gateway
    limiter = build_limiter(gw)
    audit = build_audit(gw.audit)
    feedback = build_feedback_store(backends.settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        limiter.check()  # a configured Redis that does not answer fails the start, naming it
        feedback.check()  # the same for the feedback store (and the SQLite file is opened)
        yield
        await backends.aclose()
        feedback.close()
        closer = getattr(audit, "close", None)
        if closer is not None:
            closer()

    # FastAPIOffline serves the Swagger UI and ReDoc assets from the package (FastAPI's default pulls
    # them from a CDN: /docs was blank on a machine without internet)
    app = FastAPIOffline(
        lifespan=lifespan,
        title="Rampart",
        version="0.1.0",
        description="Corruption-resistant enterprise search gateway. Authenticate with "
        "`Authorization: Bearer rk_…` (create keys with `rampart keys create`).",
    )
    app.add_middleware(BodyLimit, max_body_bytes=gw.max_body_bytes)  # inner: 413s get the ids below
    app.middleware("http")(request_ids_and_metrics)
    install_error_handlers(app)
    oidc = OidcVerifier(gw.oidc) if gw.oidc.issuer is not None else None
    access = Access(keys, gw, limiter, oidc, audit)
    app.include_router(health_router(backends, access))
    app.include_router(documents_router(backends, access, audit))
    app.include_router(search_router(backends, access, audit, feedback))
    app.include_router(feedback_router(feedback, access, audit))
    install_openapi(app, gw)  # the settings' limits in /openapi.json
    instrument_fastapi(app)  # server span per request; /healthz, /readyz, /metrics excluded
    return app


async def request_ids_and_metrics(
    request: Request, call_next: Callable[[Request], Awaitable[Response]]
) -> Response:
    """The request middleware: a request id (the caller's if it is a plain token, it ends up in logs
    and headers), the trace id header, and the per-route HTTP metrics. The body limit is
    :class:`BodyLimit`'s, inside this one."""
    given = request.headers.get("x-request-id", "")
    request.state.request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
    telemetry.request_id.set(request.state.request_id)
    started = time.perf_counter()
    response = await call_next(request)
    response.headers["x-request-id"] = request.state.request_id
    trace_id = current_trace_id()  # the request's server span (instrument_fastapi)
    if trace_id:
        response.headers["x-trace-id"] = trace_id
    route = request.scope.get("route")
    rampart_metrics.record_http(
        getattr(route, "path", "unmatched"), response.status_code, time.perf_counter() - started
    )
    return response
