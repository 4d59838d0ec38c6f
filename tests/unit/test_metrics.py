"""Metrics and trace plumbing without I/O: stage histograms from stage spans, counters, the log
filter's trace ids, W3C propagation through the Serve message, the topology helper, and exporters
chosen by the standard OTEL_* variables (clear errors for bad ones)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from prometheus_client import REGISTRY

from services.api.schemas import SearchRequest
from services.common import metrics
from services.common.errors import ErrorCode, RampartError
from services.common.otel import _exporters, context_from, current_span_id, current_trace_id, trace_headers
from services.common.telemetry import ContextFilter
from services.common.tracing import stage_span
from services.common.types import Principal
from services.orchestrator.serving.messages import PipelineSearchRequest
from tests.trace_topology import SEARCH_EMBEDDED_CELERY, edges, missing

tracer = TracerProvider().get_tracer("test")  # a local SDK provider: real ids, nothing exported


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_stage_span_records_the_stage_histogram_even_when_the_stage_raises() -> None:
    before = sample("rampart_stage_duration_seconds_count", stage="unit.stage")
    with stage_span("rampart.unit.stage", depth=3):
        pass
    with pytest.raises(ValueError), stage_span("rampart.unit.stage"):
        raise ValueError("boom")
    assert sample("rampart_stage_duration_seconds_count", stage="unit.stage") == before + 2


def test_request_error_and_outcome_counters() -> None:
    ok = sample("rampart_requests_total", service="retrieval", method="Search", code="ok")
    bad = sample("rampart_errors_total", service="retrieval", code="invalid_argument")
    metrics.record_request("retrieval", "Search", "ok", seconds=0.01)
    metrics.record_request("retrieval", "Search", ErrorCode.INVALID_ARGUMENT.value)
    assert sample("rampart_requests_total", service="retrieval", method="Search", code="ok") == ok + 1
    assert sample("rampart_errors_total", service="retrieval", code="invalid_argument") == bad + 1
    assert sample("rampart_stage_duration_seconds_count", stage="retrieval.Search") >= 1

    rerank = sample("rampart_degraded_total", stage="rerank")
    adversarial = sample("rampart_factcheck_verdicts_total", verdict="adversarial")
    metrics.record_outcome(["rerank"], ["relevant", "adversarial"])
    assert sample("rampart_degraded_total", stage="rerank") == rerank + 1
    assert sample("rampart_factcheck_verdicts_total", verdict="adversarial") == adversarial + 1

    body, content_type = metrics.exposition()
    assert content_type.startswith("text/plain")
    for name in ("rampart_stage_duration_seconds_bucket", "rampart_requests_total", "rampart_degraded_total"):
        assert name.encode() in body


def test_trace_ids_in_logs_and_helpers_only_inside_a_span() -> None:
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "msg", (), None)
    ContextFilter().filter(record)
    assert record.__dict__["trace_id"] == "" and current_trace_id() is None
    with tracer.start_as_current_span("request") as span:
        ContextFilter().filter(record)
        ids = span.get_span_context()
        assert record.__dict__["trace_id"] == current_trace_id() == format(ids.trace_id, "032x")
        assert record.__dict__["span_id"] == current_span_id() == format(ids.span_id, "016x")


def test_trace_context_crosses_a_serve_message() -> None:
    """What HandleBackend sends and PipelineService.reply attaches: same trace on the far side."""
    with tracer.start_as_current_span("ingress"):
        sent = trace_headers()
        trace_id = current_trace_id()
    assert sent["traceparent"].split("-")[1] == trace_id
    call = PipelineSearchRequest(
        principal=Principal(tenant="acme", user="alice"),
        request=SearchRequest(query="leave policy"),
        trace_context=sent,
    )
    received = PipelineSearchRequest.model_validate_json(call.model_dump_json())
    token = otel_context.attach(context_from(received.trace_context))
    try:
        with tracer.start_as_current_span("pipeline"):
            assert current_trace_id() == trace_id
    finally:
        otel_context.detach(token)


@dataclass
class FakeSpan:
    name: str
    span_id: bytes
    parent_span_id: bytes = b""
    trace_id: bytes = b"t" * 16


def test_topology_reports_missing_edges_in_declaration_order() -> None:
    spans = [
        FakeSpan("POST /v1/search", b"1"),
        FakeSpan("rampart.search", b"2", b"1"),
        FakeSpan("rampart.retrieve", b"3", b"2"),
        FakeSpan("orphan", b"4", b"9"),  # parent not exported: no edge
    ]
    assert edges(spans) == {("POST /v1/search", "rampart.search"), ("rampart.search", "rampart.retrieve")}
    gone = missing(spans, SEARCH_EMBEDDED_CELERY)
    assert gone[0] == ("rampart.search", "rampart.rerank")
    assert ("POST /v1/search", "rampart.search") not in gone


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, set()),  # unset: trace ids, no export
        ({"OTEL_TRACES_EXPORTER": "none"}, set()),
        ({"OTEL_TRACES_EXPORTER": "console"}, {"ConsoleSpanExporter"}),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
            {"opentelemetry.exporter.otlp.proto.http.trace_exporter.OTLPSpanExporter"},
        ),
        (  # the signal-specific protocol wins; grpc is the default
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
            {"opentelemetry.exporter.otlp.proto.grpc.trace_exporter.OTLPSpanExporter"},
        ),
        (
            {"OTEL_TRACES_EXPORTER": "console, otlp"},
            {"ConsoleSpanExporter", "opentelemetry.exporter.otlp.proto.grpc.trace_exporter.OTLPSpanExporter"},
        ),
    ],
)
def test_exporters_come_from_the_standard_variables(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], expected: set[str]
) -> None:
    for key in ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    found = {
        cls.__name__ if cls.__name__ == "ConsoleSpanExporter" else f"{cls.__module__}.{cls.__name__}"
        for cls in _exporters().values()
    }
    assert found == expected


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkinn"}, "'zipkinn'"),
        (
            {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "carrier-pigeon"},
            "'carrier-pigeon'",
        ),
    ],
)
def test_a_bad_exporter_setting_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(RampartError) as err:
        _exporters()
    assert err.value.code is ErrorCode.INVALID_ARGUMENT and named in err.value.message
