"""The ``Retriever`` protocol: hybrid search as the search pipeline sees it.

Embedded: :class:`services.retrieval.hybrid.HybridRetriever` over the local index. Distributed:
:class:`services.retrieval.remote_retriever.RemoteRetriever`, a gRPC client of the retrieval service.
The pipeline cannot tell them apart; one contract suite runs against both. :func:`build_retriever`
picks one from settings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from services.common.settings import RampartSettings
from services.common.types import Principal

if TYPE_CHECKING:
    from services.retrieval.embedder import Embedder
    from services.retrieval.graph.config import GraphSettings
    from services.retrieval.hybrid import HybridRetriever, SearchOutcome, SearchParams
    from services.retrieval.index import SearchIndex


class Retriever(Protocol):
    def search(self, query: str, principal: Principal, params: SearchParams) -> SearchOutcome:
        """Top ``params.top_k`` chunks the principal may read (ACL applied inside the index)."""
        ...

    def stats(self) -> dict[str, int]:
        """Index counts (documents, chunks, …) for readiness and ``/readyz``."""
        ...

    def close(self) -> None:
        """Release what the retriever holds itself (a remote one's channel; the index is closed by its owner)."""
        ...


def build_retriever(settings: RampartSettings, index: SearchIndex, embedder: Embedder) -> Retriever:
    """Hybrid search as settings place it, the only place that choice is made: the retrieval
    service's over gRPC when ``remote.retrieval_address`` is set (it searches its own index, so
    ``index`` and ``embedder`` go unused), else :class:`HybridRetriever` over ``index`` in this
    process. Pair it with :func:`services.retrieval.index.open_index`, which decides the same way."""
    address = settings.remote.retrieval_address
    if address:
        from services.retrieval.remote_retriever import RemoteRetriever

        return RemoteRetriever.connect(
            address, settings.remote, max_message_bytes=settings.retrieval_service.max_message_bytes
        )
    return local_retriever(index, embedder, settings.graph)


def local_retriever(index: SearchIndex, embedder: Embedder, graph: GraphSettings | None) -> HybridRetriever:
    """Hybrid search over ``index`` in this process (the embedded runtime's, the retrieval
    service's), with the knowledge graph's stream as ``graph`` configures it (``None``: none)."""
    from services.retrieval.graph.entities import open_extractor
    from services.retrieval.graph.stream import GraphStream
    from services.retrieval.hybrid import HybridRetriever

    stream = GraphStream(index, open_extractor(graph), graph) if graph is not None else None
    return HybridRetriever(index, embedder, stream)
