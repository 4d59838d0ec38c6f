"""Trace topology: one /v1/search is one trace, across the gateway, the pipeline's stages, the Celery
producer and a real worker process, exported over OTLP to a real receiver (oteltap).

The gateway (embedded pipeline) runs in this process; the fact-check runs on ``rampart worker`` over a
real redis-server, exporting with nothing but the standard ``OTEL_*`` variables. The expected edges
are declared in ``tests/trace_topology.py``; the response's ``trace_id`` (and ``X-Trace-Id``) must be
the trace the spans were exported under. The same holds across the Ray Serve hops (a driver in a
loopback-only namespace) and a real gRPC call; the metrics server serves the shared registry.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import grpc
import httpx
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from services.common.errors import ErrorCode, RampartError
from services.common.metrics import record_request, start_metrics_server
from services.common.otel import (
    configure_tracing,
    current_trace_id,
    instrument_celery,
    instrument_grpc_client,
    instrument_grpc_server,
    instrument_redis,
)
from services.orchestrator.runtime import Runtime
from services.rerank.reranker import Reranker
from services.retrieval.embedder import Embedder
from tests.conftest import REPO
from tests.integration.otlp_receiver import OtlpReceiver, has_names, otlp_receiver_fixture  # noqa: F401
from tests.integration.redis_server import CeleryWorker, RedisServer, celery_settings
from tests.integration.test_gateway import search
from tests.integration.test_gateway_factcheck import WIKI
from tests.integration.test_gateway_rerank import client_for
from tests.integration.test_serve_ray import loopback_namespace
from tests.trace_topology import FACTCHECK_TASK, SEARCH_EMBEDDED_CELERY, SEARCH_SERVE, missing

QUERY = "what is the VPN password and how do I set up the VPN"


@pytest.fixture()
def exporting(otlp_receiver: OtlpReceiver) -> Iterator[BatchSpanProcessor]:
    """This process's provider (configure_tracing) exporting to the receiver for this test only: the
    provider is process-wide and outlives the test, so its processor is shut down at the end."""
    provider = configure_tracing("rampart-gateway")
    instrument_celery()
    instrument_redis()
    processor = BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{otlp_receiver.endpoint}/v1/traces"))
    provider.add_span_processor(processor)
    yield processor
    processor.shutdown()  # type: ignore[no-untyped-call]  # later spans of this session go nowhere


def test_one_search_is_one_trace_across_gateway_stages_and_celery_worker(
    otlp_receiver: OtlpReceiver,
    exporting: BatchSpanProcessor,
    start_redis: Callable[[], RedisServer],
    start_worker: Callable[..., CeleryWorker],
    models_dir: Path,
    embedder: Embedder,
    reranker: Reranker,
    tmp_path: Path,
) -> None:
    redis = start_redis()
    start_worker(redis, **otlp_receiver.env())  # the worker learns where to export from OTEL_* only
    settings = celery_settings(redis, models_dir).model_copy(update={"data_dir": tmp_path / "data"})
    runtime = Runtime.open(settings, embedder=embedder, reranker=reranker)
    try:
        client, keys = client_for(runtime, tmp_path, WIKI)
        with client:
            resp = search(client, keys["alice"], QUERY)
            scraped = client.get("/metrics").text
    finally:
        runtime.close()
    assert resp.status_code == 200, resp.text
    body = resp.json()
    trace_id = body["trace_id"]
    assert trace_id is not None and len(trace_id) == 32 and int(trace_id, 16) != 0
    assert resp.headers["x-trace-id"] == trace_id
    assert body["candidates"]["judged"] >= 2 and body["degraded"] == []  # the worker really judged
    for stage in ("search", "retrieve", "rerank", "factcheck"):  # the stage spans feed the histogram
        assert f'rampart_stage_duration_seconds_count{{stage="{stage}"}}' in scraped

    exporting.force_flush()
    names = {name for edge in SEARCH_EMBEDDED_CELERY for name in edge}
    judged = body["candidates"]["judged"]
    run = f"run/{FACTCHECK_TASK}"
    sent = f"apply_async/{FACTCHECK_TASK}"
    # every task sent (a fresh cache: ceil(judged / items_per_task) of them) has its worker span
    spans = otlp_receiver.wait_for(
        lambda got: (
            has_names(sorted(names))(got)
            and sum(s.name == run for s in got) >= sum(s.name == sent for s in got) >= 1
        ),
        trace_id=trace_id,
    )
    assert judged >= 2

    assert missing(spans, SEARCH_EMBEDDED_CELERY) == []
    roots = [s for s in spans if not s.parent_span_id]
    assert [s.name for s in roots] == ["POST /v1/search"]  # one request, one trace, one root
    by_name = {s.name: s for s in spans}
    attrs = {kv.key: kv.value for kv in by_name["rampart.factcheck"].attributes}
    assert attrs["rampart.factcheck.filtered"].int_value == len(body["filtered"]) >= 1
    retrieve = {kv.key: kv.value for kv in by_name["rampart.retrieve"].attributes}
    assert retrieve["rampart.retrieval.candidates"].int_value >= len(body["results"])
    assert attrs["rampart.factcheck.judged"].int_value == judged
    # the worker's task spans belong to this trace and no other
    assert {s.trace_id.hex() for s in otlp_receiver.spans() if s.name == run} == {trace_id}
    # no query text on any span unless trace_content is on
    for span in spans:
        for kv in span.attributes:
            assert "VPN password" not in kv.value.string_value, (span.name, kv.key)


def test_one_search_is_one_trace_across_the_ray_serve_hops(models_dir: Path, tmp_path: Path) -> None:
    """gateway span → ingress replica (traceparent header) → pipeline replica (context in the handle's
    message): one trace, the declared edges, and the response's trace_id is the gateway's."""
    out = tmp_path / "out.json"
    ray_tmp = Path(tempfile.mkdtemp(prefix="rt-", dir="/tmp"))  # short: unix socket path limit
    env = {
        **os.environ,
        "RAY_TMPDIR": str(ray_tmp),
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAMPART_LOG_LEVEL": "WARNING",
    }
    try:
        cmd = [*loopback_namespace(), sys.executable, "-m", "tests.integration.serve_trace_driver"]
        proc = subprocess.run(  # our interpreter and module
            [*cmd, str(tmp_path / "w"), str(models_dir), "8124", str(out)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert proc.returncode == 0 and out.exists(), f"driver failed:\n{proc.stderr[-4000:]}"
    report = json.loads(out.read_text())
    trace_id = report["gateway_trace_id"]
    assert report["status"] == 200 and report["body"]["results"]
    assert report["body"]["trace_id"] == trace_id  # filled in the pipeline replica, two hops away
    spans = [
        SimpleNamespace(
            name=s["name"],
            trace_id=bytes.fromhex(s["trace"]),
            span_id=bytes.fromhex(s["id"]),
            parent_span_id=bytes.fromhex(s["parent"]),
        )
        for s in report["spans"]
    ]
    assert missing(spans, SEARCH_SERVE) == []
    assert [s.name for s in spans].count("POST /v1/search") == 2  # the gateway's and the ingress's
    assert [s.name for s in spans if not s.parent_span_id] == ["POST /v1/search"]
    assert report["other_traces"] == []  # no stage span started a trace of its own


GRPC_CHECK = "/grpc.health.v1.Health/Check"


def test_grpc_client_and_server_spans_continue_the_callers_trace(
    otlp_receiver: OtlpReceiver, exporting: BatchSpanProcessor
) -> None:
    """instrument_grpc_server/instrument_grpc_client on a real aio server and channel (loopback):
    the traceparent rides in the metadata, so caller → client span → server span is one trace."""
    instrument_grpc_server()
    instrument_grpc_client()
    tracer = trace.get_tracer("test")

    async def call() -> str | None:
        server = grpc.aio.server()  # the patched factory: the OTel interceptor comes first
        health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                with tracer.start_as_current_span("caller"):
                    await health_pb2_grpc.HealthStub(channel).Check(
                        health_pb2.HealthCheckRequest(), timeout=5
                    )
                    # the sync client (services/common/grpc_client.py), from a worker thread
                    await asyncio.to_thread(sync_check, port)
                    return current_trace_id()
        finally:
            await server.stop(None)

    trace_id = asyncio.run(call())
    exporting.force_flush()
    spans = otlp_receiver.wait_for(lambda got: len(got) >= 5, trace_id=trace_id)
    assert missing(spans, [("caller", GRPC_CHECK), (GRPC_CHECK, GRPC_CHECK)]) == []
    kinds = sorted(s.kind for s in spans if s.name == GRPC_CHECK)
    assert kinds == [Span.SPAN_KIND_SERVER] * 2 + [Span.SPAN_KIND_CLIENT] * 2  # aio and sync calls


def sync_check(port: int) -> None:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)


def test_metrics_server_serves_the_shared_registry_and_names_a_taken_port() -> None:
    """What a gRPC service runs for Prometheus: the same metrics the gateway's /metrics shows."""
    server, thread = start_metrics_server("127.0.0.1", 0)
    try:
        record_request("retrieval", "Search", "ok", seconds=0.002)
        text = httpx.get(f"http://127.0.0.1:{server.server_port}/metrics", timeout=5).text
        assert 'rampart_requests_total{code="ok",method="Search",service="retrieval"}' in text
        assert 'rampart_stage_duration_seconds_count{stage="retrieval.Search"}' in text
        with pytest.raises(RampartError) as taken:
            start_metrics_server("127.0.0.1", server.server_port)
        assert taken.value.code is ErrorCode.UNAVAILABLE and str(server.server_port) in taken.value.message
    finally:
        server.shutdown()
        thread.join(timeout=5)
