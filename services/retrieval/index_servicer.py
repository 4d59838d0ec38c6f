"""``IndexService``: the ``SearchIndex`` protocol and its capabilities served over gRPC by the process
that owns the index.

Every read that returns text, vectors or scores of stored chunks takes the caller's principal and
answers only for what it may read (searches filter inside the index; reads by id through
:mod:`services.retrieval.read_scope`): the service is reachable over the network, and its callers
authenticate as services, not as users (docs/security.md).

The embedded index is single-process (it holds an exclusive lock), so the retrieval service opens it
and every other process (the ingest service, tools) reaches it through :class:`RemoteIndex`. Index
calls block (SQLite, tantivy, faiss): they run on a bounded thread pool, never on the event loop.
"""

from __future__ import annotations

import functools
from concurrent.futures import Executor
from typing import Any

import grpc
from rampart.retrieval.v1 import index_pb2, index_pb2_grpc

from services.common import wire
from services.common.errors import invalid
from services.common.grpc_server import run_blocking
from services.common.types import Principal, SearchFilters
from services.retrieval.capabilities import MAX_COPY_LIMIT, check_reads
from services.retrieval.index import SearchIndex
from services.retrieval.read_scope import readable_chunks, readable_ids

MAX_LIMIT = 100_000


def principal_of(request: Any) -> Principal:
    """The request's principal (any read request with a ``principal`` field: the index's and the link
    extension's); a search without one is refused (reads are always scoped)."""
    if not request.HasField("principal"):
        raise invalid("principal is required: every read is evaluated as a caller", field="principal")
    return wire.principal_from_pb(request.principal)


def filters_of(request: Any) -> SearchFilters | None:
    """The read's extra restrictions, ``None`` when the request sets none (any read request with a
    ``filters`` field: the index's and the link extension's)."""
    return wire.filters_from_pb(request.filters) if request.HasField("filters") else None


def check_limit(limit: int) -> int:
    if not 0 <= limit <= MAX_LIMIT:
        raise invalid(f"limit = {limit} is out of range; use 0..{MAX_LIMIT}", field="limit", value=limit)
    return limit


def _ref(tenant: str, doc_id: str) -> tuple[str, str]:
    if not tenant or not doc_id:
        raise invalid(
            f"tenant ({tenant!r}) and doc_id ({doc_id!r}) are both required",
            field="tenant" if not tenant else "doc_id",
        )
    return tenant, doc_id


class IndexServicer(index_pb2_grpc.IndexServiceServicer):
    """Each method converts with :mod:`services.common.wire` and calls ``index`` on ``executor``."""

    def __init__(self, index: SearchIndex, executor: Executor) -> None:
        self.index = index
        self.executor = executor

    async def Info(
        self, request: index_pb2.InfoRequest, context: grpc.aio.ServicerContext
    ) -> index_pb2.InfoResponse:
        return index_pb2.InfoResponse(dim=self.index.dim)

    async def Write(
        self, request: index_pb2.WriteRequest, context: grpc.aio.ServicerContext
    ) -> index_pb2.WriteResponse:
        docs = [wire.document_write_from_pb(d, dim=self.index.dim) for d in request.docs]
        await run_blocking(self.executor, self.index.write, docs)
        return index_pb2.WriteResponse()

    async def Delete(
        self, request: index_pb2.DeleteRequest, context: grpc.aio.ServicerContext
    ) -> index_pb2.DeleteResponse:
        tenant, doc_id = _ref(request.tenant, request.doc_id)
        deleted = await run_blocking(self.executor, self.index.delete, tenant, doc_id)
        return index_pb2.DeleteResponse(deleted=deleted)

    async def Mark(
        self, request: index_pb2.MarkRequest, context: grpc.aio.ServicerContext
    ) -> index_pb2.MarkResponse:
        tenant, doc_id = _ref(request.tenant, request.doc_id)
        state = wire.state_from_pb(request.state)
        error = request.error if request.HasField("error") else None
        await run_blocking(
            self.executor, self.index.mark, tenant, doc_id, request.version, state, error=error
        )
        return index_pb2.MarkResponse()

    async def Status(
        self, request: index_pb2.DocumentRef, context: grpc.aio.ServicerContext
    ) -> index_pb2.StatusResponse:
        status = await run_blocking(self.executor, self.index.status, *_ref(request.tenant, request.doc_id))
        if status is None:
            return index_pb2.StatusResponse()
        return index_pb2.StatusResponse(status=wire.status_to_pb(status))

    async def Current(
        self, request: index_pb2.DocumentRef, context: grpc.aio.ServicerContext
    ) -> index_pb2.CurrentResponse:
        current = await run_blocking(self.executor, self.index.current, *_ref(request.tenant, request.doc_id))
        if current is None:
            return index_pb2.CurrentResponse(found=False)
        version, content_hash, state = current
        return index_pb2.CurrentResponse(
            found=True, version=version, content_hash=content_hash, state=wire.state_to_pb(state)
        )

    async def TokenLengths(
        self, request: index_pb2.TokenLengthsRequest, context: grpc.aio.ServicerContext
    ) -> index_pb2.TokenLengthsResponse:
        lengths = await run_blocking(self.executor, self.index.token_lengths, list(request.texts))
        return index_pb2.TokenLengthsResponse(lengths=lengths)

    async def Bm25(
        self, request: index_pb2.Bm25Request, context: grpc.aio.ServicerContext
    ) -> index_pb2.HitsResponse:
        principal = principal_of(request)
        limit = check_limit(request.limit)
        filters = filters_of(request)
        restrict = list(request.restrict.cids) if request.HasField("restrict") else None
        if limit == 0:
            return index_pb2.HitsResponse()
        hits = await run_blocking(
            self.executor,
            self.index.bm25,
            request.query,
            principal,
            limit,
            filters=filters,
            restrict=restrict,
        )
        return _hits(hits)

    async def Dense(
        self, request: index_pb2.DenseRequest, context: grpc.aio.ServicerContext
    ) -> index_pb2.HitsResponse:
        principal = principal_of(request)
        limit = check_limit(request.limit)
        vector = wire.vector_from_bytes(request.vector, dim=self.index.dim)
        filters = filters_of(request)
        if limit == 0:
            return index_pb2.HitsResponse()
        hits = await run_blocking(self.executor, self.index.dense, vector, principal, limit, filters=filters)
        return _hits(hits)

    async def _readable(self, request: Any) -> list[int]:
        """The request's ``cids`` its principal may read (required: see :mod:`.read_scope`)."""
        principal = principal_of(request)
        return await run_blocking(self.executor, readable_ids, self.index, list(request.cids), principal)

    async def Cosine(
        self, request: index_pb2.CosineRequest, context: grpc.aio.ServicerContext
    ) -> index_pb2.CosineResponse:
        vector = wire.vector_from_bytes(request.vector, dim=self.index.dim)
        cids = await self._readable(request)
        scores = await run_blocking(self.executor, self.index.cosine, vector, cids)
        return index_pb2.CosineResponse(scores=scores)

    async def StoredVectors(
        self, request: index_pb2.ChunkIdsRequest, context: grpc.aio.ServicerContext
    ) -> index_pb2.StoredVectorsResponse:
        cids = await self._readable(request)
        stored = await run_blocking(self.executor, check_reads(self.index).stored_vectors, cids)
        return index_pb2.StoredVectorsResponse(
            vectors={k: wire.vector_to_bytes(v) for k, v in stored.items()}
        )

    async def CopyCosines(
        self, request: index_pb2.CopyCosinesRequest, context: grpc.aio.ServicerContext
    ) -> index_pb2.CopyCosinesResponse:
        principal = principal_of(request)
        limit = request.limit
        if not 1 <= limit <= MAX_COPY_LIMIT:
            raise invalid(
                f"limit = {limit} is out of range; use 1..{MAX_COPY_LIMIT}", field="limit", value=limit
            )
        if not 0.0 <= request.expand <= 1.0:
            raise invalid(
                f"expand = {request.expand} is out of range; use 0..1 (0 = none)",
                field="expand",
                value=request.expand,
            )
        cosines = await run_blocking(
            self.executor,
            functools.partial(check_reads(self.index).copy_cosines, expand=request.expand),
            await self._readable(request),
            principal,
            limit,
        )
        return index_pb2.CopyCosinesResponse(cosines=wire.copy_cosines_to_pb(cosines))

    async def Chunks(
        self, request: index_pb2.ChunkIdsRequest, context: grpc.aio.ServicerContext
    ) -> index_pb2.ChunksResponse:
        chunks = await run_blocking(
            self.executor, readable_chunks, self.index, list(request.cids), principal_of(request)
        )
        return index_pb2.ChunksResponse(chunks={k: wire.chunk_to_pb(c) for k, c in chunks.items()})

    async def Stats(
        self, request: index_pb2.IndexStatsRequest, context: grpc.aio.ServicerContext
    ) -> index_pb2.IndexStatsResponse:
        counts = await run_blocking(self.executor, self.index.stats)
        return index_pb2.IndexStatsResponse(counts=counts)


def _hits(hits: list[tuple[int, float]]) -> index_pb2.HitsResponse:
    return index_pb2.HitsResponse(hits=[index_pb2.Hit(cid=c, score=s) for c, s in hits])
