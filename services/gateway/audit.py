"""The audit log: who searched, answered, ingested, read the status of or deleted what, and who
failed to authenticate, one JSON object per line (``gateway.audit.path``).

Each event names the caller (tenant, user, the key id or token subject, client address), the request
and trace ids, the action, its outcome, and the documents involved: the ids ingested or deleted, and
for a search or answer the returned document and chunk ids and the withheld ones. It holds no text:
the query appears as a SHA-256 (so one user's repeated query can be followed without storing what was
asked) unless ``gateway.audit.include_text`` is on, and never any document text or key.

Why a file of JSON lines: every log shipper (Fluent Bit, Vector, the CloudWatch agent) tails one, and
appends of a line under ``O_APPEND`` from one process do not interleave. The file is created mode
600: it says who read what.

Usage: ``audit = build_audit(settings.gateway.audit)``; ``audit.record(AuditEvent(...))``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from services.gateway.config import AuditSettings

log = logging.getLogger(__name__)


@dataclass
class AuditEvent:
    action: str  # search | answer | ingest | status | delete | authenticate (a failed one)
    outcome: str  # ok | denied | not_found | error
    tenant: str
    user: str
    credential: str  # "key:<id>" or "oidc:<tenant>:<user>"
    client: str
    request_id: str
    trace_id: str | None = None
    doc_ids: list[str] = field(default_factory=list)
    chunk_ids: list[str] = field(default_factory=list)
    withheld_doc_ids: list[str] = field(default_factory=list)
    # ingest: the sources the documents were written under (a key without a namespace names them itself)
    sources: list[str] = field(default_factory=list)
    query_sha256: str | None = None
    query: str | None = None
    answer: str | None = None
    detail: str | None = None
    time: float = field(default_factory=time.time)


class AuditSink(Protocol):
    include_text: bool

    def record(self, event: AuditEvent) -> None: ...


class NoAudit:
    """No audit log configured."""

    include_text = False

    def record(self, event: AuditEvent) -> None:
        return None


class JsonLinesAudit:
    """Appends one JSON line per event to ``path`` (created mode 600)."""

    def __init__(self, path: Path, *, include_text: bool = False) -> None:
        self.path = path
        self.include_text = include_text
        self._lock = threading.Lock()
        self._fd: int | None = None

    def _open(self) -> int:
        if self._fd is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        return self._fd

    def record(self, event: AuditEvent) -> None:
        data = {k: v for k, v in asdict(event).items() if v is not None and v != []}
        line = (json.dumps(data, ensure_ascii=False, separators=(",", ":")) + "\n").encode()
        with self._lock:
            try:
                os.write(self._open(), line)
            except OSError as exc:  # an audit failure is loud in the logs, but does not fail the search
                log.error("audit log write failed", extra={"path": str(self.path), "error": exc.strerror})

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def query_fields(query: str, include_text: bool) -> tuple[str, str | None]:
    """The query as the audit log keeps it: its hash, and the text only when enabled."""
    return hashlib.sha256(query.encode()).hexdigest(), (query if include_text else None)


def build_audit(settings: AuditSettings) -> AuditSink:
    """The one factory: a JSON-lines file when ``gateway.audit.path`` is set, else none."""
    if settings.path is None:
        return NoAudit()
    return JsonLinesAudit(settings.path, include_text=settings.include_text)
