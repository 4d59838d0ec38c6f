"""The ``Retriever`` protocol: hybrid search as the search pipeline sees it.

Embedded: :class:`services.retrieval.hybrid.HybridRetriever` over the local index. Distributed:
:class:`services.retrieval.remote_retriever.RemoteRetriever`, a gRPC client of the retrieval service.
The pipeline cannot tell them apart; one contract suite runs against both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from services.common.types import Principal

if TYPE_CHECKING:
    from services.retrieval.hybrid import SearchOutcome, SearchParams


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
