"""``RetrievalService``: hybrid search served over gRPC (what :class:`RemoteRetriever` calls).

The retriever blocks (embedding, index reads): each search runs on the bounded thread pool with the
RPC's context (its deadline), never on the event loop.
"""

from __future__ import annotations

from concurrent.futures import Executor

import grpc
from rampart.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc

from services.common import wire
from services.common.errors import invalid
from services.common.grpc_server import run_blocking
from services.retrieval.retriever import Retriever

MAX_TOP_K = 1000
MAX_CANDIDATES = 10_000


class RetrievalServicer(retrieval_pb2_grpc.RetrievalServiceServicer):
    def __init__(self, retriever: Retriever, executor: Executor) -> None:
        self.retriever = retriever
        self.executor = executor

    async def Search(
        self, request: retrieval_pb2.SearchRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.SearchResponse:
        if not request.HasField("principal"):
            raise invalid("principal is required: every search is evaluated as a caller", field="principal")
        if request.top_k > MAX_TOP_K:
            raise invalid(f"top_k = {request.top_k} is above {MAX_TOP_K}", field="top_k", value=request.top_k)
        if request.candidates > MAX_CANDIDATES:
            raise invalid(
                f"candidates = {request.candidates} is above {MAX_CANDIDATES}",
                field="candidates",
                value=request.candidates,
            )
        query, principal, params = wire.search_request_from_pb(request)
        outcome = await run_blocking(self.executor, self.retriever.search, query, principal, params)
        return wire.outcome_to_pb(outcome)

    async def Stats(
        self, request: retrieval_pb2.StatsRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.StatsResponse:
        counts = await run_blocking(self.executor, self.retriever.stats)
        return retrieval_pb2.StatsResponse(counts=counts)
