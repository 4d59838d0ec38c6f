"""``/healthz`` (liveness), ``/readyz`` (the pipeline and ingest can serve) and ``/metrics``
(Prometheus): unauthenticated, for the orchestration around the gateway."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from fastapi.responses import PlainTextResponse

from services.api.schemas import ErrorBody
from services.common import metrics as rampart_metrics
from services.gateway.backends import GatewayBackends


def health_router(backends: GatewayBackends) -> APIRouter:
    router = APIRouter(tags=["ops"])

    @router.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: the process is up."""
        return {"status": "ok"}

    @router.get("/readyz", responses={503: {"model": ErrorBody}})
    async def readyz() -> dict[str, Any]:
        """Readiness: the pipeline can serve (index open, models loaded; remote stages say ready or
        degraded) and ingest can take documents."""
        return await backends.readiness()

    @router.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> Response:
        body, content_type = rampart_metrics.exposition()
        return Response(body, media_type=content_type)

    return router
