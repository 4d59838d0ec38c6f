"""``rampart.ingest.v1.IngestService`` handlers over :class:`DurableIngest` (blocking work on a pool).

An ``Ingest`` is acknowledged only after its batch is journaled; the handler then waits for the
results until just before the caller's deadline, so the caller hears this service's own
``DEADLINE_EXCEEDED`` ("accepted, poll status") rather than a bare transport timeout.
"""

from __future__ import annotations

from concurrent.futures import Executor

import grpc
from rampart.ingest.v1 import ingest_pb2, ingest_pb2_grpc

from services.common.errors import ErrorCode, RampartError, invalid
from services.common.grpc_server import remaining_s, run_blocking
from services.common.wire import document_from_pb, status_to_pb
from services.ingest.durable import DurableIngest
from services.ingest.wire import result_to_pb

_MARGIN_S = 0.25  # answer this long before the caller's deadline, so our message reaches it


class IngestServicer(ingest_pb2_grpc.IngestServiceServicer):
    def __init__(
        self, durable: DurableIngest, executor: Executor, *, max_batch_documents: int, default_wait_s: float
    ) -> None:
        self.durable = durable
        self.executor = executor
        self.max_batch_documents = max_batch_documents
        self.default_wait_s = default_wait_s

    async def Ingest(  # noqa: N802 (gRPC method names)
        self, request: ingest_pb2.IngestRequest, context: grpc.aio.ServicerContext
    ) -> ingest_pb2.IngestResponse:
        count = len(request.documents)
        if count == 0:  # like the in-process ingest: nothing to do, nothing journaled
            return ingest_pb2.IngestResponse(processed=True)
        if count > self.max_batch_documents:
            raise RampartError(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"the batch has {count} documents, the limit is {self.max_batch_documents} "
                "(RAMPART_GATEWAY__MAX_BATCH_DOCUMENTS); split it",
                documents=count,
            )
        docs = [document_from_pb(d) for d in request.documents]
        batch_id = await run_blocking(self.executor, self.durable.submit, docs)
        if request.queue_only:
            return ingest_pb2.IngestResponse(batch_id=batch_id, processed=False)
        left = remaining_s()
        wait_s = self.default_wait_s if left is None else max(0.0, left - _MARGIN_S)
        results = await run_blocking(self.executor, self.durable.wait, batch_id, wait_s)
        return ingest_pb2.IngestResponse(
            batch_id=batch_id, processed=True, results=[result_to_pb(r) for r in results]
        )

    async def Delete(  # noqa: N802 (gRPC method names)
        self, request: ingest_pb2.DeleteRequest, context: grpc.aio.ServicerContext
    ) -> ingest_pb2.DeleteResponse:
        _require(request.tenant, "tenant")
        _require(request.doc_id, "doc_id")
        left = remaining_s()
        wait_s = 30.0 if left is None else max(0.0, left - _MARGIN_S)
        deleted = await run_blocking(
            self.executor, self.durable.delete, request.tenant, request.doc_id, wait_s
        )
        return ingest_pb2.DeleteResponse(deleted=deleted)

    async def Status(  # noqa: N802 (gRPC method names)
        self, request: ingest_pb2.StatusRequest, context: grpc.aio.ServicerContext
    ) -> ingest_pb2.StatusResponse:
        _require(request.tenant, "tenant")
        _require(request.doc_id, "doc_id")
        status = await run_blocking(self.executor, self.durable.status, request.tenant, request.doc_id)
        reply = ingest_pb2.StatusResponse()
        if status is not None:
            reply.status.CopyFrom(status_to_pb(status))
        return reply

    async def Stats(  # noqa: N802 (gRPC method names)
        self, request: ingest_pb2.StatsRequest, context: grpc.aio.ServicerContext
    ) -> ingest_pb2.StatsResponse:
        journal = await run_blocking(self.executor, self.durable.journal.stats)
        try:
            index = await run_blocking(self.executor, self.durable.service.index.stats)
        except RampartError:  # the queue depth matters most exactly when the index is away
            index = {}
        return ingest_pb2.StatsResponse(
            queued_batches=journal.queued_batches,
            queued_bytes=journal.queued_bytes,
            done_batches=journal.done_batches,
            index=index,
        )


def _require(value: str, field: str) -> None:
    if not value:
        raise invalid(f"{field} is empty; send the document's {field}", field=field)
