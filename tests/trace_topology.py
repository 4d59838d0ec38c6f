"""The expected shape of a request's trace: parent → child span names, one list per path.

Every service that joins a request's path extends this file with its edges (span names are stable and
listed in docs/observability.md); the trace-topology tests assert every declared edge appears in one
trace. Names are the spans' own: ``rampart.*`` from :func:`services.common.tracing.stage_span`,
``<METHOD> <route>`` from the FastAPI instrumentation, ``apply_async/<task>`` and ``run/<task>`` from
the Celery one, the command (``MGET``…) from the Redis one, ``/<package.Service>/<Method>`` from gRPC.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

Edge = tuple[str, str]

FACTCHECK_TASK = "rampart.factcheck.evidence_batch"  # passages go in batches (items_per_task)

# /v1/search on the gateway with the in-process pipeline and the Celery fact-checker (embedded index).
SEARCH_EMBEDDED_CELERY: list[Edge] = [
    ("POST /v1/search", "rampart.search"),
    ("rampart.search", "rampart.retrieve"),
    ("rampart.search", "rampart.rerank"),
    ("rampart.search", "rampart.factcheck"),
    ("rampart.factcheck", "MGET"),  # the evidence cache, before any task is sent
    ("rampart.factcheck", f"apply_async/{FACTCHECK_TASK}"),  # producer, in the gateway's process
    (f"apply_async/{FACTCHECK_TASK}", "LPUSH"),  # the task message onto the Redis broker
    (f"apply_async/{FACTCHECK_TASK}", f"run/{FACTCHECK_TASK}"),  # consumer, in a worker process
    (f"run/{FACTCHECK_TASK}", "MGET"),  # the worker's evidence-cache lookup, one for the batch
]

# /v1/search through the Ray Serve orchestrator: the gateway's span → the ingress replica's request
# span (W3C traceparent over HTTP) → the pipeline replica (context carried in the handle's message).
SEARCH_SERVE: list[Edge] = [
    ("POST /v1/search", "POST /v1/search"),  # gateway server span → ingress server span
    ("POST /v1/search", "rampart.search"),  # ingress → pipeline replica, across the Serve handle
    ("rampart.search", "rampart.retrieve"),
    ("rampart.search", "rampart.rerank"),
    ("rampart.search", "rampart.factcheck"),  # in-process fact-check in this set-up
]


# /v1/search through the whole distributed stack (tests/e2e): gateway → Serve ingress → pipeline replica
# → retrieval service (gRPC), Triton (gRPC) and the Celery workers.
RETRIEVAL_SEARCH_RPC = "/rampart.retrieval.v1.RetrievalService/Search"
TRITON_INFER_RPC = "/inference.GRPCInferenceService/ModelInfer"
SEARCH_STACK: list[Edge] = [
    *SEARCH_SERVE[:5],
    ("rampart.retrieve", RETRIEVAL_SEARCH_RPC),  # client span, in the pipeline replica
    (RETRIEVAL_SEARCH_RPC, RETRIEVAL_SEARCH_RPC),  # client → server span, in the retrieval service
    ("rampart.rerank", TRITON_INFER_RPC),  # tritonclient's gRPC call (Triton exports no spans itself)
    ("rampart.factcheck", f"apply_async/{FACTCHECK_TASK}"),
    (f"apply_async/{FACTCHECK_TASK}", f"run/{FACTCHECK_TASK}"),
]

# POST /v1/documents through the stack: gateway → ingest service (gRPC) → its journal worker, which
# continues the request's trace from the context journaled with the batch → the retrieval service.
INGEST_RPC = "/rampart.ingest.v1.IngestService/Ingest"
INDEX_WRITE_RPC = "/rampart.retrieval.v1.IndexService/Write"
INGEST_STACK: list[Edge] = [
    ("POST /v1/documents", INGEST_RPC),  # client span in the gateway
    (INGEST_RPC, INGEST_RPC),  # client → server span, in the ingest service
    (INGEST_RPC, "rampart.ingest.batch"),  # server span → the worker's processing (journaled context)
    ("rampart.ingest.batch", "rampart.ingest.embed"),
    ("rampart.ingest.batch", "rampart.ingest.write"),
    ("rampart.ingest.write", INDEX_WRITE_RPC),
    (INDEX_WRITE_RPC, INDEX_WRITE_RPC),  # client → server span, in the retrieval service
]


class SpanLike(Protocol):
    """An OTLP ``Span`` (opentelemetry-proto), as a receiver hands it over."""

    name: str
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes


def edges(spans: Iterable[SpanLike]) -> set[Edge]:
    """The parent → child name pairs present in ``spans`` (parents outside ``spans`` are skipped)."""
    spans = list(spans)
    by_id = {s.span_id: s for s in spans}
    return {(by_id[s.parent_span_id].name, s.name) for s in spans if s.parent_span_id in by_id}


def missing(spans: Iterable[SpanLike], expected: Sequence[Edge]) -> list[Edge]:
    """The declared edges not found in ``spans``, in declaration order (empty: the shape holds)."""
    found = edges(spans)
    return [e for e in expected if e not in found]
