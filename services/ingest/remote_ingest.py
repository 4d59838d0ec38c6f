"""``RemoteIngest``: the :class:`Ingestor` protocol over gRPC, to the durable ingest service.

Same results and errors as :class:`LocalIngestor` (the server's ``RampartError`` comes back intact).
``ingest`` is retried on ``UNAVAILABLE`` (safe: ingest is idempotent by ``(id, version)``, a resent
batch reports ``unchanged``); ``delete`` is not (a lost reply would turn ``True`` into ``False``).
No network in the constructor: the channel connects on the first call.

Usage::

    ingestor = RemoteIngest.from_settings(      # remote.ingest_address
        settings.remote, max_message_bytes=settings.ingest_service.max_message_bytes
    )
    ingestor.check_ready()                        # UNAVAILABLE unless the service is SERVING
    results = ingestor.ingest(docs)
"""

from __future__ import annotations

from collections.abc import Sequence

from rampart.common.v1 import types_pb2
from rampart.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from services.common.config import RemoteSettings
from services.common.errors import ErrorCode, RampartError
from services.common.grpc_client import DEFAULT_RETRY_WINDOW_MS, Caller, check_ready, open_channel
from services.common.service_auth import ServiceAuth
from services.common.types import Document, DocumentStatus
from services.common.wire import document_to_pb, status_from_pb
from services.ingest.service import IngestResult, Outcome
from services.ingest.wire import result_from_pb

SERVICE = "rampart.ingest.v1.IngestService"


class RemoteIngest:
    def __init__(
        self,
        address: str,
        *,
        deadline_ms: int,
        ingest_deadline_ms: int,
        max_message_bytes: int,
        auth: ServiceAuth | None = None,
        retry_window_ms: int = DEFAULT_RETRY_WINDOW_MS,
    ) -> None:
        self.address = address
        self.ingest_deadline_ms = ingest_deadline_ms
        self.channel = open_channel(address, max_message_bytes=max_message_bytes, auth=auth)
        self._caller = Caller(self.channel, address, deadline_ms=deadline_ms, retry_window_ms=retry_window_ms)
        self._stub = ingest_pb2_grpc.IngestServiceStub(self.channel)

    @classmethod
    def from_settings(cls, settings: RemoteSettings, *, max_message_bytes: int) -> RemoteIngest:
        """The ingest service at ``remote.ingest_address``; ``max_message_bytes``: the service's own
        limit (``ingest_service.max_message_bytes``), so a batch it accepts is one this sends."""
        address = settings.ingest_address
        if not address:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                "RAMPART_REMOTE__INGEST_ADDRESS is unset; set it to the ingest service's host:port "
                "(e.g. 127.0.0.1:50052) or ingest in-process",
            )
        return cls(
            address,
            deadline_ms=settings.deadline_ms,
            ingest_deadline_ms=settings.ingest_deadline_ms,
            max_message_bytes=max_message_bytes,
            auth=ServiceAuth.from_settings(settings),
            retry_window_ms=settings.retry_window_ms,
        )

    def ingest(self, docs: Sequence[Document]) -> list[IngestResult]:
        """Send the batch and wait for its results (durable once the service accepted it). A document
        whose content cannot travel (bad base64) is rejected here, alone, as the in-process service
        rejects it; the others go."""
        results: dict[int, IngestResult] = {}
        sendable: list[tuple[int, types_pb2.Document]] = []
        for i, d in enumerate(docs):
            try:
                sendable.append((i, document_to_pb(d)))
            except ValueError as exc:
                results[i] = IngestResult(
                    id=d.id,
                    version=d.version,
                    outcome=Outcome.REJECTED,
                    error=str(exc),
                    code=ErrorCode.INVALID_ARGUMENT.value,
                )
        if sendable:
            reply = self._caller.call(
                self._stub.Ingest,
                ingest_pb2.IngestRequest(documents=[m for _, m in sendable]),
                idempotent=True,
                deadline_ms=self.ingest_deadline_ms,
            )
            for (i, _), r in zip(sendable, reply.results, strict=True):
                results[i] = result_from_pb(r)
        return [results[i] for i in range(len(docs))]

    def submit(self, docs: Sequence[Document]) -> int:
        """Send the batch and return as soon as it is journaled (its id); poll :meth:`status` after.
        A document whose content cannot travel (bad base64) refuses the whole batch, naming it."""
        try:
            documents = [document_to_pb(d) for d in docs]
        except ValueError as exc:
            raise RampartError(ErrorCode.INVALID_ARGUMENT, f"{exc}; nothing was queued") from exc
        reply = self._caller.call(
            self._stub.Ingest,
            ingest_pb2.IngestRequest(documents=documents, queue_only=True),
            idempotent=True,
            deadline_ms=self.ingest_deadline_ms,
        )
        return int(reply.batch_id)

    def delete(self, tenant: str, doc_id: str) -> bool:
        reply = self._caller.call(
            self._stub.Delete, ingest_pb2.DeleteRequest(tenant=tenant, doc_id=doc_id), idempotent=False
        )
        return bool(reply.deleted)

    def status(self, tenant: str, doc_id: str) -> DocumentStatus | None:
        reply = self._caller.call(
            self._stub.Status, ingest_pb2.StatusRequest(tenant=tenant, doc_id=doc_id), idempotent=True
        )
        return status_from_pb(reply.status) if reply.HasField("status") else None

    def stats(self) -> dict[str, int]:
        """Journal queue depth plus the index's counts (keys ``journal_*`` and the index's own)."""
        reply = self._caller.call(self._stub.Stats, ingest_pb2.StatsRequest(), idempotent=True)
        return {
            "journal_queued_batches": reply.queued_batches,
            "journal_queued_bytes": reply.queued_bytes,
            "journal_done_batches": reply.done_batches,
            **dict(reply.index),
        }

    def check_ready(self) -> None:
        if not check_ready(self.channel, SERVICE):
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"the ingest service at {self.address} is not SERVING (down, starting, or waiting for the "
                "retrieval service)",
                address=self.address,
            )

    def close(self) -> None:
        self.channel.close()
