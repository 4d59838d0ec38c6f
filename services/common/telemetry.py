"""Logging (structured key-value, JSON or console) with request/tenant ids attached by one filter.

The filter also adds the current OpenTelemetry ``trace_id``/``span_id`` (services/common/otel.py),
so a log line leads to its trace and back. Never log secrets or document/query text: call sites pass
ids and counts in ``extra``.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from typing import Any

from services.common.otel import current_span_id, current_trace_id

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="")
tenant_id: contextvars.ContextVar[str] = contextvars.ContextVar("tenant_id", default="")

# uvicorn adds a coloured duplicate of its message; drop it along with the standard attributes.
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {
    "message",
    "asctime",
    "color_message",
}


class ContextFilter(logging.Filter):
    """Adds the current request, tenant, trace and span ids to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        record.tenant = tenant_id.get()
        # empty outside a span: the formatters leave empty fields out
        record.trace_id = current_trace_id() or ""
        record.span_id = current_span_id() or ""
        return True


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and v not in ("", None)}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            **_extras(record),
        }
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        return json.dumps(body, default=str)


class ConsoleFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        pairs = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = f"{self.formatTime(record, '%H:%M:%S')} {record.levelname:<7} {record.name}: {record.getMessage()}"
        line = f"{line} {pairs}" if pairs else line
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def configure_logging(level: str = "INFO", fmt: str = "console") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else ConsoleFormatter())
    handler.addFilter(ContextFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # onnxruntime's transformer optimizer logs every fusion at INFO under these names; opensearch-py
    # every request (index.backend=opensearch: thousands per ingest).
    for noisy in (
        "httpx",
        "opensearch",
        "uvicorn.access",
        "faiss.loader",
        "pypdf",
        "fusion_base",
        "onnx_model",
        "onnx_model_bert",
        "fusion_utils",
        "fusion_skiplayernorm",
        "fusion_attention",
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)
