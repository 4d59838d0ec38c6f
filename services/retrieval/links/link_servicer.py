"""``LinkService``: linking's reads served over gRPC by the process that owns the index, beside its
``IndexService`` (the stack's retrieval service registers both).

A separate service rather than RPCs of ``IndexService``: the core index contract stays what every
index must do. The retrieval service registers it whatever its index; one that does not serve
linking's reads answers FAILED_PRECONDITION naming the capability and the fix.
"""

from __future__ import annotations

from concurrent.futures import Executor

import grpc
from rampart.links.v1 import links_pb2, links_pb2_grpc

from services.common.grpc_server import run_blocking
from services.retrieval.index import SearchIndex
from services.retrieval.index_servicer import check_limit, filters_of, principal_of
from services.retrieval.links.reads import link_reads

LINK_SERVICE = "rampart.links.v1.LinkService"


class LinkServicer(links_pb2_grpc.LinkServiceServicer):
    def __init__(self, index: SearchIndex, executor: Executor | None) -> None:
        self.index = index
        self.executor = executor

    async def Named(
        self, request: links_pb2.NamedRequest, context: grpc.aio.ServicerContext
    ) -> links_pb2.NamedResponse:
        principal = principal_of(request)
        limit = check_limit(request.limit)
        filters = filters_of(request)
        if limit == 0:
            return links_pb2.NamedResponse()
        hits = await run_blocking(
            self.executor,
            link_reads(self.index).named,
            list(request.texts),
            principal,
            limit,
            filters=filters,
        )
        return links_pb2.NamedResponse(cids=[cid for cid, _ in hits])
