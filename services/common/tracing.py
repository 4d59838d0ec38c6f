"""Spans for the pipeline stages through the OpenTelemetry API (a no-op until an SDK is configured).

Stages open spans with :func:`stage_span`; query and passage text go on a span only through
:func:`content_attributes`, which returns nothing unless content tracing is enabled
(``RAMPART_TRACE_CONTENT=true``): queries are user data and traces are widely readable.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import Span

_tracer = trace.get_tracer("rampart")

AttributeValue = str | bool | int | float


@contextmanager
def stage_span(name: str, **attributes: AttributeValue) -> Iterator[Span]:
    """A child span of the current one, e.g. ``with stage_span("rampart.chain.hop", step=2):``."""
    with _tracer.start_as_current_span(name) as span:
        span.set_attributes(attributes)
        yield span


def content_attributes(enabled: bool, **text: str) -> Mapping[str, str]:
    """``text`` as span attributes (cut to 512 characters) only when content tracing is on."""
    return {k: v[:512] for k, v in text.items()} if enabled else {}
