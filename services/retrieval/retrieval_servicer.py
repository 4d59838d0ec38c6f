"""``RetrievalService``: hybrid search served over gRPC (what :class:`RemoteRetriever` calls).

The retriever blocks (embedding, index reads): each search runs on the bounded thread pool with the
RPC's context (its deadline), never on the event loop.
"""

from __future__ import annotations

from concurrent.futures import Executor

import grpc
from rampart.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc

from services.common import wire
from services.common.grpc_server import run_blocking
from services.retrieval.retriever import Retriever


class RetrievalServicer(retrieval_pb2_grpc.RetrievalServiceServicer):
    def __init__(self, retriever: Retriever, executor: Executor) -> None:
        self.retriever = retriever
        self.executor = executor

    async def Search(
        self, request: retrieval_pb2.SearchRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.SearchResponse:
        query, principal, params = wire.search_request_from_pb(request)
        outcome = await run_blocking(self.executor, self.retriever.search, query, principal, params)
        return wire.outcome_to_pb(outcome)

    async def Stats(
        self, request: retrieval_pb2.StatsRequest, context: grpc.aio.ServicerContext
    ) -> retrieval_pb2.StatsResponse:
        counts = await run_blocking(self.executor, self.retriever.stats)
        return retrieval_pb2.StatsResponse(counts=counts)
