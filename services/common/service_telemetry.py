"""A gRPC service process's ``main``: settings, logs, traces and metrics, then its server.

Order matters: the tracer provider and the gRPC instrumentation must exist before the server and
the channels are created (the instrumentors patch their factories).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from services.common.config import GrpcServerSettings
from services.common.errors import RampartError
from services.common.metrics import start_metrics_server
from services.common.otel import (
    configure_tracing,
    flush_tracing,
    instrument_grpc_client,
    instrument_grpc_server,
)
from services.common.settings import RampartSettings
from services.common.telemetry import configure_logging

log = logging.getLogger(__name__)


def start_service_telemetry(service: str, server: GrpcServerSettings) -> Callable[[], None]:
    """Tracing (exported per the standard ``OTEL_*`` variables), gRPC server+client spans and
    ``/metrics`` on ``server.metrics_port`` (0: none). Returns the stop function (flushes spans)."""
    configure_tracing(f"rampart-{service}")
    instrument_grpc_server()
    instrument_grpc_client()
    http = start_metrics_server(server.host, server.metrics_port)[0] if server.metrics_port else None

    def stop() -> None:
        if http is not None:
            http.shutdown()
        flush_tracing()

    return stop


def run_service(
    service: str,
    server: Callable[[RampartSettings], GrpcServerSettings],
    serve: Callable[[RampartSettings], Coroutine[Any, Any, None]],
) -> int:
    """``python -m services.<service>.server``: serve until SIGTERM/SIGINT; exit 2 with the reason
    logged when it cannot start (a bad setting, a taken port, a missing dependency)."""
    settings = RampartSettings()
    configure_logging(settings.log_level, settings.log_format)
    stop: Callable[[], None] | None = None
    try:
        stop = start_service_telemetry(service, server(settings))
        asyncio.run(serve(settings))
    except RampartError as exc:
        log.error("%s service stopped: %s", service, exc.message, extra={"details": exc.details})
        return 2
    finally:
        if stop is not None:
            stop()
    return 0
