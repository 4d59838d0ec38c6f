"""The ``Ingestor`` protocol (what the gateway needs from ingest) and its embedded implementation.

Two implementations, one contract suite (``tests/contracts/ingestor.py``):
:class:`LocalIngestor` runs :class:`IngestService` in this process on the local index (embedded
mode); :class:`services.ingest.remote_ingest.RemoteIngest` calls the durable ingest service over
gRPC (distributed mode, ``settings.remote.ingest_address``). :func:`build_ingestor` picks one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from services.common.settings import RampartSettings
from services.common.types import Document, DocumentStatus
from services.ingest.service import IngestResult, IngestService


class Ingestor(Protocol):
    def ingest(self, docs: Sequence[Document]) -> list[IngestResult]:
        """Index a batch; one result per document, in order (idempotent by ``(id, version)``)."""
        ...

    def delete(self, tenant: str, doc_id: str) -> bool:
        """Remove a document; ``False`` if it did not exist (or was already deleted)."""
        ...

    def status(self, tenant: str, doc_id: str) -> DocumentStatus | None:
        """Ingest state of a document (``pending`` while accepted and not yet processed)."""
        ...

    def check_ready(self) -> None:
        """Raise :class:`RampartError` (``UNAVAILABLE``) when ingest cannot take documents now."""
        ...

    def close(self) -> None: ...


class LocalIngestor:
    """Embedded mode: ingest in this process, synchronously; the index belongs to the caller."""

    def __init__(self, service: IngestService) -> None:
        self.service = service

    def ingest(self, docs: Sequence[Document]) -> list[IngestResult]:
        return self.service.ingest(docs)

    def delete(self, tenant: str, doc_id: str) -> bool:
        return self.service.delete(tenant, doc_id)

    def status(self, tenant: str, doc_id: str) -> DocumentStatus | None:
        return self.service.index.status(tenant, doc_id)

    def check_ready(self) -> None:
        self.service.index.stats()  # raises if the index cannot be read

    def close(self) -> None:
        """Nothing to release: the index is closed by whoever opened it (the runtime)."""


def build_ingestor(settings: RampartSettings, service: IngestService | None = None) -> Ingestor:
    """Ingest as settings place it, the only place that choice is made: the durable ingest service
    over gRPC when ``remote.ingest_address`` is set, else ``service`` (the runtime's) in this process.

    A caller that holds no index (the remote gateway) passes no ``service``; without an address that
    fails, naming ``RAMPART_REMOTE__INGEST_ADDRESS``.
    """
    if settings.remote.ingest_address or service is None:
        from services.ingest.remote_ingest import RemoteIngest

        return RemoteIngest.from_settings(
            settings.remote, max_message_bytes=settings.ingest_service.max_message_bytes
        )
    return LocalIngestor(service)
