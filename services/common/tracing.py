"""Spans for the pipeline stages through the OpenTelemetry API (a no-op until an SDK is configured).

Stages open spans with :func:`stage_span`, which also records the stage's latency in the
``rampart_stage_duration_seconds{stage}`` histogram (the span name without ``rampart.``), so traces
and dashboards name a stage the same way (docs/observability.md lists the names). Query and passage
text go on a span only through :func:`content_attributes`, which returns nothing unless content
tracing is enabled (``RAMPART_TRACE_CONTENT=true``): queries are user data and traces are widely read.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import Span

from services.common.metrics import observe_stage

_tracer = trace.get_tracer("rampart")

AttributeValue = str | bool | int | float


@contextmanager
def stage_span(name: str, **attributes: AttributeValue) -> Iterator[Span]:
    """A child span of the current one, e.g. ``with stage_span("rampart.chain.hop", step=2):``;
    its duration goes to the stage histogram whether the block returns or raises."""
    started = time.perf_counter()
    try:
        with _tracer.start_as_current_span(name) as span:
            span.set_attributes(attributes)
            yield span
    finally:
        observe_stage(name.removeprefix("rampart."), time.perf_counter() - started)


def content_attributes(enabled: bool, **text: str) -> Mapping[str, str]:
    """``text`` as span attributes (cut to 512 characters) only when content tracing is on."""
    return {k: v[:512] for k, v in text.items()} if enabled else {}
