"""One traced search through a real Ray Serve orchestrator, spans caught by oteltap (run by
test_tracing.py inside a loopback-only network namespace, as Ray needs).

This process plays the gateway: its span is the parent of the ingress request (W3C ``traceparent``
header); the ingress and pipeline replicas export with nothing but the ``OTEL_*`` variables they
inherit. Usage: ``python -m tests.integration.serve_trace_driver WORK_DIR MODELS_DIR PORT OUT_JSON``.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx
from opentelemetry import trace

from services.api.schemas import SearchRequest
from services.common.otel import configure_tracing, current_trace_id, flush_tracing, trace_headers
from services.common.settings import RampartSettings
from services.common.types import Document, Principal
from services.orchestrator.runtime import Runtime
from services.orchestrator.serving.config import ServeSettings
from services.orchestrator.serving.messages import PipelineSearchRequest
from tests.integration.otlp_receiver import OtlpReceiver, has_names
from tests.trace_topology import SEARCH_SERVE

DOCS = [
    {
        "id": "leave",
        "title": "Leave policy",
        "acl": {"groups": ["*"]},
        "text": "Every employee gets 25 vacation days per year. Parental leave is sixteen weeks.",
    },
    {
        "id": "vpn",
        "title": "VPN setup",
        "acl": {"groups": ["eng"]},
        "text": "Install the VPN client, then sign in with SSO. Vacation days need a ticket.",
    },
]


def main(work: Path, models_dir: Path, port: int, out: Path) -> None:
    from services.orchestrator.serving import serve_app

    receiver = OtlpReceiver().start()
    os.environ.update(receiver.env())  # before ray.init: every replica inherits it
    report: dict[str, Any] = {}
    settings = RampartSettings(
        data_dir=work / "data",
        models_dir=models_dir,
        log_level="WARNING",
        serve=ServeSettings(port=port, ingress_max_replicas=1, ready_timeout_s=90.0, object_store_mb=100),
    )
    runtime = Runtime.open(settings)
    runtime.ingest.ingest([Document.model_validate({**d, "tenant": "acme"}) for d in DOCS])
    runtime.close()  # the replica opens the index
    try:
        configure_tracing("rampart-gateway")
        serve_app.connect(settings)
        serve_app.deploy(settings)
        serve_app.wait_http_ready(settings)
        call = PipelineSearchRequest(
            principal=Principal(tenant="acme", user="alice", groups=["eng"]),
            request=SearchRequest(query="How many vacation days do I get?", top_k=3),
        )
        tracer = trace.get_tracer("serve-trace-driver")
        with (
            httpx.Client(base_url=serve_app.base_url(settings), timeout=60) as http,
            tracer.start_as_current_span("POST /v1/search", kind=trace.SpanKind.SERVER),
        ):
            report["gateway_trace_id"] = current_trace_id()
            r = http.post(
                "/v1/search",
                content=call.model_dump_json(),
                headers={"content-type": "application/json", **trace_headers()},
            )
        report["status"] = r.status_code
        report["body"] = r.json()
        flush_tracing()
        names = sorted({n for edge in SEARCH_SERVE for n in edge})
        # "POST /v1/search" is both the gateway's span and the ingress's: wait for the two
        spans = receiver.wait_for(
            lambda got: has_names(names)(got) and [s.name for s in got].count("POST /v1/search") >= 2,
            trace_id=report["gateway_trace_id"],
            timeout_s=30,
        )
        report["spans"] = [
            {
                "name": s.name,
                "id": s.span_id.hex(),
                "parent": s.parent_span_id.hex(),
                "trace": s.trace_id.hex(),
            }
            for s in spans
        ]
        report["other_traces"] = sorted(
            {s.trace_id.hex() for s in receiver.spans() if s.name.startswith("rampart.")}
            - {report["gateway_trace_id"]}
        )
    finally:
        serve_app.shutdown()
        receiver.stop()
        out.write_text(json.dumps(report, default=str))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
