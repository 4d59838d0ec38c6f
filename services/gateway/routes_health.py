"""``/healthz`` (liveness), ``/readyz`` (ready or not) and ``/metrics`` (Prometheus), unauthenticated
for the orchestration around the gateway; ``/v1/readiness``, the per-stage details, behind auth.

Why the split: the details name stages, models, index sizes and, when a stage is down, the address it
was reached at and why it failed: a map of the deployment for whoever can reach the port. A load
balancer or kubelet needs one bit. The details go to a caller with ``gateway.readiness_details_scope``
(admin by default) or to the stack's own tooling, which proves itself with the deployment's internal
token (``remote.internal_token``, the header the orchestrator already checks: ``rampart stack up``
waits on ``/readyz`` with it and reads each stage) or, while ``gateway.readiness_details_from_loopback``
is on (off by default: a reverse proxy on the same host makes every caller look local), by calling
from the same host.
"""

from __future__ import annotations

import hmac
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import PlainTextResponse

from services.api.schemas import ErrorBody, Readiness
from services.common import metrics as rampart_metrics
from services.common.errors import ErrorCode, RampartError
from services.common.internal_auth import INTERNAL_TOKEN_HEADER
from services.gateway.access import Access, require
from services.gateway.backends import GatewayBackends
from services.gateway.errors import ERROR_RESPONSES

LOOPBACK = ("127.0.0.1", "::1")


def health_router(backends: GatewayBackends, access: Access) -> APIRouter:
    router = APIRouter(tags=["ops"])
    token = backends.settings.remote.internal_token
    secret = token.get_secret_value().encode() if token is not None else None

    from_loopback = backends.settings.gateway.readiness_details_from_loopback

    def trusted(request: Request) -> bool:
        given = request.headers.get(INTERNAL_TOKEN_HEADER, "").encode()
        if secret is not None and given and hmac.compare_digest(given, secret):
            return True
        host = request.client.host if request.client is not None else ""
        return from_loopback and host in LOOPBACK

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: the process is up."""
        return {"status": "ok"}

    @router.get(
        "/readyz", responses={200: {"model": Readiness}, 429: {"model": ErrorBody}, 503: {"model": ErrorBody}}
    )
    async def readyz(request: Request) -> Any:
        """Readiness: ``{"status": "ready"}`` when the pipeline can serve, else 503. The per-stage
        details are at ``/v1/readiness`` (authenticated). Limited per client address
        (``gateway.anonymous_rate_limit_per_minute``) like failed authentications."""
        if trusted(request):
            return await backends.readiness()  # the stack's own readiness wait reads the stages
        await run_in_threadpool(access.anonymous, request)  # per-address limit (may be Redis)
        try:
            await backends.readiness()
        except RampartError as exc:
            raise RampartError(ErrorCode.UNAVAILABLE, "not ready") from exc
        return Readiness(status="ready")

    @router.get("/v1/readiness", responses=ERROR_RESPONSES)
    async def readiness(request: Request) -> dict[str, Any]:
        """Per-stage readiness (index, models, rerank, fact-check, ingest: ready or degraded, with why);
        needs a key with ``gateway.readiness_details_scope`` (admin by default)."""
        caller = await run_in_threadpool(access.authenticate, request, 1)
        require(caller.principal, backends.settings.gateway.readiness_details_scope)
        return await backends.readiness()

    @router.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> Response:
        body, content_type = rampart_metrics.exposition()
        return Response(body, media_type=content_type)

    return router
