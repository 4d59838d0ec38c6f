"""Every Prometheus metric Rampart exports, in one place (docs/observability.md lists them).

Metrics are process-wide facts, like loggers, so they live on prometheus_client's default registry
(which also carries the process and GC collectors): the gateway's ``/metrics`` serves it, and the gRPC
services serve it with :func:`start_metrics_server`. Stages record through the helpers below, never by
creating metrics of their own, so names and labels stay one list. Label values come from closed sets
(stage and route names, error codes, verdicts), never from user input.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from wsgiref.simple_server import WSGIServer

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    start_http_server,
)

from services.common.errors import ErrorCode, RampartError

# Stage latencies run from ~1 ms (fusion, cache hits) to seconds (fact-check deadline, chains).
STAGE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

STAGE_SECONDS = Histogram(
    "rampart_stage_duration_seconds",
    "Latency of one pipeline stage (the span name without 'rampart.': retrieve, rerank, factcheck, …)",
    ["stage"],
    buckets=STAGE_BUCKETS,
)
HTTP_SECONDS = Histogram(
    "rampart_http_request_seconds", "Gateway request latency by route and HTTP status", ["route", "status"]
)
HTTP_ERRORS = Counter("rampart_http_errors_total", "Gateway errors by error code", ["code"])
REQUESTS = Counter(
    "rampart_requests_total",
    "Requests handled, by service, method and outcome code",
    ["service", "method", "code"],
)
REQUEST_ERRORS = Counter(
    "rampart_errors_total",
    "Failed requests by service and error code (RampartError codes)",
    ["service", "code"],
)
DEGRADED = Counter("rampart_degraded_total", "Responses served without a stage, by stage", ["stage"])
VERDICTS = Counter("rampart_factcheck_verdicts_total", "Fact-check verdicts by class", ["verdict"])


def observe_stage(stage: str, seconds: float) -> None:
    """Record one run of ``stage`` (``retrieve``, ``rerank``, ``factcheck``, …)."""
    STAGE_SECONDS.labels(stage=stage).observe(seconds)


def record_request(service: str, method: str, code: str, seconds: float | None = None) -> None:
    """One handled request of a service (``code`` is ``ok`` or an :class:`ErrorCode` value)."""
    REQUESTS.labels(service=service, method=method, code=code).inc()
    if code != "ok":
        REQUEST_ERRORS.labels(service=service, code=code).inc()
    if seconds is not None:
        observe_stage(f"{service}.{method}", seconds)


def record_http(route: str, status: int, seconds: float) -> None:
    """One gateway request (``route`` is the route template, not the raw path)."""
    HTTP_SECONDS.labels(route=route, status=str(status)).observe(seconds)


def record_http_error(code: ErrorCode) -> None:
    HTTP_ERRORS.labels(code=code.value).inc()


def record_outcome(degraded: Iterable[str], verdicts: Iterable[str]) -> None:
    """A served response: the stages it went without and the verdict of every judged document."""
    for stage in degraded:
        DEGRADED.labels(stage=stage).inc()
    for verdict in verdicts:
        VERDICTS.labels(verdict=verdict).inc()


def exposition(registry: CollectorRegistry = REGISTRY) -> tuple[bytes, str]:
    """The registry in Prometheus' text format, with its content type (what ``/metrics`` answers)."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


def start_metrics_server(
    host: str, port: int, registry: CollectorRegistry = REGISTRY
) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``/metrics`` on ``host:port`` from a daemon thread (the gRPC services' scrape target);
    ``server.shutdown()`` stops it (graceful stop). Port 0 picks a free one: ``server.server_port``.

    Raises ``RampartError(UNAVAILABLE)`` naming the address when it cannot bind.
    """
    try:
        return start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise RampartError(
            ErrorCode.UNAVAILABLE,
            f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}); pick a free port",
            host=host,
            port=port,
        ) from exc
