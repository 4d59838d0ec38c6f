"""The retrieval service: one process owning the index, serving ``RetrievalService`` + ``IndexService``.

``python -m services.retrieval.server`` reads settings from the environment (``RAMPART_*``; host and
port from ``settings.retrieval_service``), loads the embedder, opens the embedded index (which only one
process may hold), builds the hybrid retriever once, and serves until SIGTERM/SIGINT: health turns
NOT_SERVING, in-flight RPCs get ``grace_s`` to finish, then the index is closed. See docs/grpc.md.
"""

from __future__ import annotations

import logging
import sys
from concurrent.futures import ThreadPoolExecutor

from rampart.links.v1 import links_pb2_grpc
from rampart.retrieval.v1 import index_pb2, index_pb2_grpc, retrieval_pb2, retrieval_pb2_grpc

from services.common.config import RetrievalServiceSettings
from services.common.grpc_server import GrpcServer
from services.common.service_auth import ServiceAuth
from services.common.service_telemetry import run_service
from services.common.settings import RampartSettings
from services.retrieval.caller_roles import method_callers
from services.retrieval.embedder import Embedder
from services.retrieval.graph.config import GraphSettings
from services.retrieval.graph.entities import preload
from services.retrieval.index import SearchIndex
from services.retrieval.index_servicer import IndexServicer
from services.retrieval.links.link_servicer import LINK_SERVICE, LinkServicer
from services.retrieval.retrieval_servicer import RetrievalServicer
from services.retrieval.retriever import local_retriever

log = logging.getLogger(__name__)

INDEX_SERVICE = index_pb2.DESCRIPTOR.services_by_name["IndexService"]
RETRIEVAL_SERVICE = retrieval_pb2.DESCRIPTOR.services_by_name["RetrievalService"]
MAX_WORKERS = 16


class RetrievalApp:
    """The gRPC server over ``index`` (and, with an ``embedder``, hybrid search over it).

    Index calls block, so they run on a thread pool bounded by ``max_concurrent_rpcs`` (at most
    :data:`MAX_WORKERS`). The index is closed once the server has drained.
    """

    def __init__(
        self,
        settings: RetrievalServiceSettings,
        index: SearchIndex,
        embedder: Embedder | None,
        graph: GraphSettings | None = None,
        *,
        auth: ServiceAuth | None = None,
    ) -> None:
        """``graph``: the knowledge graph's settings for the search this server runs (``None``: the
        search has no graph stream and says so when asked for it)."""
        self.index = index
        self.executor = ThreadPoolExecutor(
            max_workers=min(settings.max_concurrent_rpcs, MAX_WORKERS), thread_name_prefix="retrieval-rpc"
        )
        self.server = GrpcServer(
            settings, name="retrieval", auth=auth, method_callers=method_callers(settings)
        )
        self.server.add(
            index_pb2_grpc.add_IndexServiceServicer_to_server,
            IndexServicer(index, self.executor),
            INDEX_SERVICE,
        )
        # always served: a call whose index lacks linking's reads gets FAILED_PRECONDITION naming the
        # capability and the fix, not a bare UNIMPLEMENTED
        self.server.add(
            links_pb2_grpc.add_LinkServiceServicer_to_server, LinkServicer(index, self.executor), LINK_SERVICE
        )
        if embedder is not None:
            if graph is not None:
                preload(graph)  # before SERVING: the first graph search must fit the RPC deadline
            self.server.add(
                retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server,
                RetrievalServicer(local_retriever(index, embedder, graph), self.executor),
                RETRIEVAL_SERVICE,
            )
        self.server.on_stop(self.executor.shutdown)
        self.server.on_stop(index.close)

    async def start(self) -> int:
        """Bind, start, and report SERVING (dependencies were built before); returns the port."""
        port = await self.server.start()
        await self.server.set_serving()
        return port

    async def stop(self, grace_s: float | None = None) -> None:
        await self.server.stop(grace_s)


async def serve(settings: RampartSettings) -> None:
    """Build the embedder and the index from ``settings`` and serve until a signal."""
    from services.retrieval.embedder import build_embedder
    from services.retrieval.index import open_stored_index

    embedder = build_embedder(settings.embedding, settings.models_dir)
    index = open_stored_index(settings, embedder.dim, embedder.model_id)
    app = RetrievalApp(
        settings.retrieval_service,
        index,
        embedder,
        settings.graph,
        auth=ServiceAuth.from_settings(settings.remote),
    )
    try:
        await app.start()
    except BaseException:
        index.close()
        raise
    await app.server.serve_until_signal()


def main() -> int:
    return run_service("retrieval", lambda s: s.retrieval_service, serve)


if __name__ == "__main__":
    sys.exit(main())
