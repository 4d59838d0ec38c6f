"""OpenTelemetry set-up for every Rampart process: the tracer provider and the instrumentations.

Each process's entry point calls :func:`configure_tracing` once, then the ``instrument_*`` helpers for
the transports it uses::

    provider = configure_tracing("rampart-retrieval")   # before building servers/clients
    instrument_grpc_server()                            # before grpc.aio.server(...)

What is exported, where and how often is configured by the standard ``OTEL_*`` variables only, read by
the SDK itself (docs/observability.md): ``OTEL_TRACES_EXPORTER`` (``otlp``, ``console``, ``none``;
unset = no export), ``OTEL_EXPORTER_OTLP_ENDPOINT``/``_PROTOCOL`` (``grpc``, the SDK's default, or
``http/protobuf``), ``OTEL_TRACES_SAMPLER``, ``OTEL_BSP_SCHEDULE_DELAY``, ``OTEL_SERVICE_NAME``.
The provider is always the SDK's, exporting or not, so every request has a real trace id to return
to the caller and to put in the logs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.sdk.environment_variables import OTEL_SERVICE_NAME
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from services.common.errors import ErrorCode, RampartError

if TYPE_CHECKING:
    from fastapi import FastAPI

log = logging.getLogger(__name__)

# Probes and scrapes would be most of the spans and say nothing about requests.
EXCLUDED_URLS = "healthz,readyz,metrics"


def configure_tracing(service_name: str) -> TracerProvider:
    """The process's SDK tracer provider, created on the first call (later calls return it).

    ``OTEL_SERVICE_NAME`` wins over ``service_name``; ``OTEL_RESOURCE_ATTRIBUTES`` adds to it. Spans
    leave through a ``BatchSpanProcessor`` per configured exporter, flushed at interpreter exit.
    """
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    # the SDK's Resource.create reads OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, but lets an
    # explicit attribute override them: pass ours only when the operator named none
    attributes = {} if os.environ.get(OTEL_SERVICE_NAME) else {SERVICE_NAME: service_name}
    provider = TracerProvider(resource=Resource.create(attributes))  # sampler: OTEL_TRACES_SAMPLER
    for name, exporter in _exporters().items():
        provider.add_span_processor(BatchSpanProcessor(exporter()))
        log.info("tracing: exporting spans", extra={"exporter": name, "service": service_name})
    trace.set_tracer_provider(provider)  # the SDK provider flushes at exit (shutdown_on_exit)
    winner = trace.get_tracer_provider()
    if winner is provider:
        return provider
    # another thread set one first, or OTEL_PYTHON_TRACER_PROVIDER named another: keep that one
    provider.shutdown()
    if isinstance(winner, TracerProvider):
        return winner
    raise RampartError(
        ErrorCode.FAILED_PRECONDITION,
        f"a non-SDK tracer provider ({type(winner).__name__}) is already set; unset "
        "OTEL_PYTHON_TRACER_PROVIDER so Rampart can export spans",
    )


def start_client_tracing(service_name: str) -> TracerProvider:
    """Tracing for a process that calls other services: the provider, then spans (and context
    propagation) for its outgoing gRPC, Celery and Redis calls. Call it before any client exists:
    the instrumentors patch the client factories."""
    provider = configure_tracing(service_name)
    instrument_grpc_client()
    instrument_celery()
    instrument_redis()
    return provider


# OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL -> the entry point the OTLP exporter packages register
OTLP_ENTRY_POINTS = {"grpc": "otlp_proto_grpc", "http/protobuf": "otlp_proto_http"}
EXPORTER_GROUP = "opentelemetry_traces_exporter"


def _exporters() -> dict[str, Any]:
    """Exporter classes named by ``OTEL_TRACES_EXPORTER`` (comma-separated; unset or ``none``: no
    export), found through the entry points the exporter packages register — the public plugin
    mechanism, not the SDK's private auto-configuration helpers. ``otlp`` picks grpc or http/protobuf
    from ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`` / ``OTEL_EXPORTER_OTLP_PROTOCOL`` (default grpc)."""
    raw = os.environ.get("OTEL_TRACES_EXPORTER", "")
    names = [n.strip() for n in raw.split(",") if n.strip() and n.strip() != "none"]
    protocol = (
        os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "grpc"
    ).strip()
    out: dict[str, Any] = {}
    for name in names:
        if name == "otlp" and protocol not in OTLP_ENTRY_POINTS:
            raise _bad_exporter(f"unknown OTLP protocol {protocol!r}")
        entry = OTLP_ENTRY_POINTS[protocol] if name == "otlp" else name
        found = entry_points(group=EXPORTER_GROUP, name=entry)
        if not found:
            raise _bad_exporter(f"no installed trace exporter is called {name!r}")
        try:
            out[name] = next(iter(found)).load()
        except Exception as exc:  # a broken plugin: say which one
            raise _bad_exporter(f"trace exporter {name!r} cannot be loaded ({exc})") from exc
    return out


def _bad_exporter(why: str) -> RampartError:
    return RampartError(
        ErrorCode.INVALID_ARGUMENT,
        f"cannot build the trace exporter from OTEL_TRACES_EXPORTER="
        f"{os.environ.get('OTEL_TRACES_EXPORTER')!r} / OTEL_EXPORTER_OTLP_PROTOCOL="
        f"{os.environ.get('OTEL_EXPORTER_OTLP_PROTOCOL')!r}: {why}; use otlp, console or none, "
        "and grpc or http/protobuf",
        field="OTEL_TRACES_EXPORTER",
    )


def flush_tracing() -> None:
    """Export the spans the batch processors still hold, now (a worker child about to exit skips
    ``atexit``, where the provider is shut down)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush()


def current_trace_id() -> str | None:
    """The current trace id as 32 hex digits, or ``None`` outside a (valid) span."""
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.is_valid else None


def current_span_id() -> str | None:
    """The current span id as 16 hex digits, or ``None`` outside a (valid) span."""
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.span_id, "016x") if ctx.is_valid else None


def trace_headers() -> dict[str, str]:
    """W3C ``traceparent`` (and ``tracestate``/baggage) of the current span, for an outgoing request
    through a client that is not instrumented (e.g. the gateway's HTTP client to Ray Serve)."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def context_from(carrier: Mapping[str, str]) -> Context:
    """The context carried by ``carrier`` (what :func:`trace_headers` produced elsewhere)."""
    return propagate.extract(dict(carrier))


# ---- instrumentations (each idempotent per process) ----------------------------------------------
def instrument_fastapi(app: FastAPI) -> None:
    """A server span per request (``POST /v1/search``) continuing the caller's ``traceparent``."""
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

    if getattr(app, "_is_instrumented_by_opentelemetry", False):
        return
    # the per-message "http send/receive" spans double the span count and carry nothing we use
    FastAPIInstrumentor.instrument_app(app, excluded_urls=EXCLUDED_URLS, exclude_spans=["receive", "send"])


def instrument_grpc_server() -> None:
    """Server spans for every ``grpc.aio.server(...)`` created after this call (it patches the
    factory: call it before building the server, and build it as ``grpc.aio.server``)."""
    from opentelemetry.instrumentation.grpc import GrpcAioInstrumentorServer

    _instrument(GrpcAioInstrumentorServer())  # type: ignore[no-untyped-call]


def instrument_grpc_client() -> None:
    """Client spans (and ``traceparent`` metadata) for every channel opened after this call, sync
    (``grpc.insecure_channel``, what ``grpc_client.open_channel`` uses) and aio alike."""
    from opentelemetry.instrumentation.grpc import GrpcAioInstrumentorClient, GrpcInstrumentorClient

    _instrument(GrpcInstrumentorClient())  # type: ignore[no-untyped-call]
    _instrument(GrpcAioInstrumentorClient())  # type: ignore[no-untyped-call]


def instrument_redis() -> None:
    """A span per Redis command (cache, sessions, Celery's result backend)."""
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    _instrument(RedisInstrumentor())


def instrument_celery() -> None:
    """Producer spans (``apply_async/<task>``, context injected into the task headers) and, in a
    worker process, consumer spans (``run/<task>``) continuing them."""
    from opentelemetry.instrumentation.celery import CeleryInstrumentor

    _instrument(CeleryInstrumentor())  # type: ignore[no-untyped-call]


def trace_celery_worker(service_name: str) -> None:
    """Trace every prefork child of a Celery worker: tracing set up *after* the fork (the batch
    processor's thread and exporter sockets do not survive one), flushed before the child exits."""
    from celery.signals import worker_process_init, worker_process_shutdown

    def start(**_: Any) -> None:
        start_client_tracing(service_name)

    def stop(**_: Any) -> None:
        flush_tracing()

    worker_process_init.connect(start, weak=False, dispatch_uid=f"rampart-otel-init-{service_name}")
    worker_process_shutdown.connect(stop, weak=False, dispatch_uid=f"rampart-otel-stop-{service_name}")


def _instrument(instrumentor: Any) -> None:
    # instrumentors are per-process singletons; a second instrument() only logs a warning
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()
