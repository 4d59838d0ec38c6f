"""The ``SearchIndex`` protocol (what retrieval and ingest need from an index) and its one factory.

Embedded default: :class:`services.retrieval.embedded_index.EmbeddedIndex` (SQLite + tantivy + faiss
on local disk). ``index.backend=opensearch``: :class:`services.retrieval.opensearch_index.OpenSearchIndex`,
one OpenSearch shared by every process (docs/opensearch.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from services.common.settings import RampartSettings
from services.common.types import Chunk, DocumentState, DocumentStatus, Principal, SearchFilters
from services.retrieval.doc_store import DocumentWrite

Hits = list[tuple[int, float]]


class SearchIndex(Protocol):
    """Storage, which every index provides: writes and document status, BM25 / dense / exact-cosine
    search scoped to a principal, chunk reads, stats. Reads that serve one consumer (the fact-check's,
    linking's) are capabilities of their own, which an index may serve too:
    :mod:`services.retrieval.capabilities`."""

    @property
    def dim(self) -> int:
        """Dimension of the stored vectors (read-only: a remote index asks its server once)."""
        ...

    # ---- writes ----
    def write(self, docs: Sequence[DocumentWrite]) -> None:
        """Upsert a batch of documents (their chunks and vectors); each ends ``indexed``."""
        ...

    def delete(self, tenant: str, doc_id: str) -> bool:
        """Remove a document; ``False`` if it did not exist (or was already deleted)."""
        ...

    def mark(
        self, tenant: str, doc_id: str, version: int, state: DocumentState, *, error: str | None = None
    ) -> None: ...

    def status(self, tenant: str, doc_id: str) -> DocumentStatus | None: ...

    def current(self, tenant: str, doc_id: str) -> tuple[int, str, DocumentState] | None:
        """``(version, content_hash, state)`` of what is stored, for idempotent ingest."""
        ...

    def token_length(self, text: str) -> int:
        """Analysed token count of ``text`` (BM25 document length)."""
        ...

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """:meth:`token_length` of many texts in one call (one RPC for a remote index)."""
        ...

    # ---- reads (every read is scoped to a principal; the filter is applied inside the search) ----
    def bm25(
        self,
        query: str,
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
        restrict: Sequence[int] | None = None,
    ) -> Hits: ...

    def dense(
        self,
        vector: npt.NDArray[np.float32],
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
    ) -> Hits: ...

    def cosine(
        self, vector: npt.NDArray[np.float32], cids: Sequence[int], principal: Principal | None = None
    ) -> dict[int, float]:
        """Exact cosine of ``vector`` with stored chunks. ``principal``: the caller, which an index across
        a process boundary (:class:`RemoteIndex`) requires and its server checks (only readable ids
        answer); an index in this process returns what is stored (its callers pass ids from their
        own principal's searches)."""
        ...

    def chunks(self, cids: Sequence[int], principal: Principal | None = None) -> dict[int, Chunk]:
        """Stored chunks by id; ``principal`` as for :meth:`cosine`."""
        ...

    def stats(self) -> dict[str, int]: ...

    def close(self) -> None: ...


def open_index(settings: RampartSettings, dim: int, model_id: str | None = None) -> SearchIndex:
    """The index a pipeline or ingest reads and writes, as settings place it: the only place that
    choice is made. With ``remote.retrieval_address`` set, the retrieval service's, over gRPC (lazy:
    nothing connects until the first call; ``dim`` and ``model_id`` are then the server's); otherwise
    the one this process stores (:func:`open_stored_index`)."""
    address = settings.remote.retrieval_address
    if address:
        from services.retrieval.remote_index import RemoteIndex

        return RemoteIndex.connect(
            address, settings.remote, max_message_bytes=settings.retrieval_service.max_message_bytes
        )
    return open_stored_index(settings, dim, model_id)


def open_stored_index(settings: RampartSettings, dim: int, model_id: str | None = None) -> SearchIndex:
    """The index this process stores into itself, by ``index.backend``: the embedded one under
    ``data_dir/index``, or the OpenSearch one at ``opensearch.url`` (refused with the fix when no node
    answers there).

    The retrieval service serves this one directly: the stack gives every program
    ``remote.retrieval_address``, and the service must not become a client of itself.
    """
    if settings.index.backend == "opensearch":
        from services.retrieval.opensearch_index import OpenSearchIndex

        return OpenSearchIndex.open(settings.opensearch, dim=dim, index=settings.index, model_id=model_id)

    from services.retrieval.embedded_index import EmbeddedIndex

    return EmbeddedIndex.open(
        settings.data_dir / "index", dim=dim, settings=settings.index, model_id=model_id
    )
