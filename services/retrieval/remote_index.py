"""``RemoteIndex``: the ``SearchIndex`` protocol and its capabilities as a gRPC client of the retrieval
service.

Callers (the ingest service, tools) cannot tell it from the embedded index: the same contract suite
runs against both, and a failure arrives as the same ``RampartError`` the local index raises
(:mod:`services.common.grpc_client`). Reads and idempotent writes (delete, mark, a whole-document
upsert) retry on ``UNAVAILABLE``; nothing connects until the first call.
"""

from __future__ import annotations

from collections.abc import Sequence

import grpc
import numpy as np
import numpy.typing as npt
from rampart.common.v1 import types_pb2
from rampart.links.v1 import links_pb2, links_pb2_grpc
from rampart.retrieval.v1 import index_pb2, index_pb2_grpc

from services.common import wire
from services.common.config import RemoteSettings
from services.common.errors import ErrorCode, RampartError
from services.common.grpc_client import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_RETRY_WINDOW_MS,
    Caller,
    check_ready,
    open_channel,
)
from services.common.service_auth import ServiceAuth
from services.common.types import Chunk, DocumentState, DocumentStatus, Principal, SearchFilters
from services.retrieval.capabilities import CheckReads, Copies
from services.retrieval.doc_store import DocumentWrite
from services.retrieval.index import Hits
from services.retrieval.links.reads import LinkReads

INDEX_SERVICE = "rampart.retrieval.v1.IndexService"


class RemoteIndex(CheckReads, LinkReads):
    """A ``SearchIndex`` (with the fact-check's and linking's reads) whose every method is one RPC of
    ``IndexService`` (linking's: of the extension's ``LinkService``, served beside it)."""

    def __init__(
        self,
        channel: grpc.Channel,
        address: str,
        *,
        deadline_ms: int,
        write_deadline_ms: int,
        retry_window_ms: int = DEFAULT_RETRY_WINDOW_MS,
    ) -> None:
        self.address = address
        self._channel = channel
        self._stub = index_pb2_grpc.IndexServiceStub(channel)
        self._links = links_pb2_grpc.LinkServiceStub(channel)
        self._caller = Caller(channel, address, deadline_ms=deadline_ms, retry_window_ms=retry_window_ms)
        self._write_deadline_ms = write_deadline_ms
        self._dim: int | None = None

    @classmethod
    def connect(
        cls, address: str, settings: RemoteSettings, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ) -> RemoteIndex:
        """A client of the retrieval service at ``address`` (lazy: no network until the first call).

        Writes get ``settings.ingest_deadline_ms`` (a batch of documents), everything else
        ``settings.deadline_ms``; ``max_message_bytes`` should be the server's
        (``retrieval_service.max_message_bytes``).
        """
        return cls(
            open_channel(
                address, max_message_bytes=max_message_bytes, auth=ServiceAuth.from_settings(settings)
            ),
            address,
            deadline_ms=settings.deadline_ms,
            write_deadline_ms=settings.ingest_deadline_ms,
            retry_window_ms=settings.retry_window_ms,
        )

    @property
    def dim(self) -> int:
        """The index's vector dimension (asked once, then cached)."""
        if self._dim is None:
            reply = self._caller.call(self._stub.Info, index_pb2.InfoRequest(), idempotent=True)
            self._dim = int(reply.dim)
        return self._dim

    def check_ready(self, timeout_s: float = 1.0) -> bool:
        """Whether the retrieval service reports ``IndexService`` SERVING."""
        return check_ready(self._channel, INDEX_SERVICE, timeout_s=timeout_s)

    # ---- writes ----
    def write(self, docs: Sequence[DocumentWrite]) -> None:
        if not docs:
            return
        request = index_pb2.WriteRequest(docs=[wire.document_write_to_pb(d) for d in docs])
        # An upsert of whole documents at given versions: sending it twice stores the same thing.
        self._caller.call(self._stub.Write, request, idempotent=True, deadline_ms=self._write_deadline_ms)

    def delete(self, tenant: str, doc_id: str) -> bool:
        # Not retried: its answer is not idempotent (a retry after a lost reply says "not found").
        reply = self._caller.call(
            self._stub.Delete, index_pb2.DeleteRequest(tenant=tenant, doc_id=doc_id), idempotent=False
        )
        return bool(reply.deleted)

    def mark(
        self, tenant: str, doc_id: str, version: int, state: DocumentState, *, error: str | None = None
    ) -> None:
        request = index_pb2.MarkRequest(
            tenant=tenant, doc_id=doc_id, version=version, state=wire.state_to_pb(state), error=error
        )
        self._caller.call(self._stub.Mark, request, idempotent=True)

    def status(self, tenant: str, doc_id: str) -> DocumentStatus | None:
        reply = self._caller.call(
            self._stub.Status, index_pb2.DocumentRef(tenant=tenant, doc_id=doc_id), idempotent=True
        )
        return wire.status_from_pb(reply.status) if reply.HasField("status") else None

    def current(self, tenant: str, doc_id: str) -> tuple[int, str, DocumentState] | None:
        reply = self._caller.call(
            self._stub.Current, index_pb2.DocumentRef(tenant=tenant, doc_id=doc_id), idempotent=True
        )
        if not reply.found:
            return None
        return int(reply.version), str(reply.content_hash), wire.state_from_pb(reply.state)

    def token_length(self, text: str) -> int:
        return self.token_lengths([text])[0]

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        reply = self._caller.call(
            self._stub.TokenLengths, index_pb2.TokenLengthsRequest(texts=list(texts)), idempotent=True
        )
        return [int(n) for n in reply.lengths]

    # ---- reads ----
    def bm25(
        self,
        query: str,
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
        restrict: Sequence[int] | None = None,
    ) -> Hits:
        request = index_pb2.Bm25Request(
            query=query,
            principal=wire.principal_to_pb(principal),
            limit=limit,
            filters=wire.filters_to_pb(filters),
        )
        if restrict is not None:
            request.restrict.cids.extend(restrict)
        reply = self._caller.call(self._stub.Bm25, request, idempotent=True)
        return [(int(h.cid), float(h.score)) for h in reply.hits]

    def dense(
        self,
        vector: npt.NDArray[np.float32],
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
    ) -> Hits:
        request = index_pb2.DenseRequest(
            vector=wire.vector_to_bytes(vector),
            principal=wire.principal_to_pb(principal),
            limit=limit,
            filters=wire.filters_to_pb(filters),
        )
        reply = self._caller.call(self._stub.Dense, request, idempotent=True)
        return [(int(h.cid), float(h.score)) for h in reply.hits]

    def named(
        self,
        texts: Sequence[str],
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
    ) -> Hits:
        request = links_pb2.NamedRequest(
            texts=list(texts),
            principal=wire.principal_to_pb(principal),
            limit=limit,
            filters=wire.filters_to_pb(filters),
        )
        reply = self._caller.call(self._links.Named, request, idempotent=True)
        return [(int(cid), 1.0) for cid in reply.cids]

    def cosine(
        self, vector: npt.NDArray[np.float32], cids: Sequence[int], principal: Principal | None = None
    ) -> dict[int, float]:
        request = index_pb2.CosineRequest(
            vector=wire.vector_to_bytes(vector), cids=list(cids), principal=_caller(principal, "cosine")
        )
        reply = self._caller.call(self._stub.Cosine, request, idempotent=True)
        return {int(k): float(v) for k, v in reply.scores.items()}

    def stored_vectors(
        self, cids: Sequence[int], principal: Principal | None = None
    ) -> dict[int, npt.NDArray[np.float32]]:
        who = _caller(principal, "stored_vectors")
        if not cids:
            return {}
        reply = self._caller.call(
            self._stub.StoredVectors,
            index_pb2.ChunkIdsRequest(cids=list(cids), principal=who),
            idempotent=True,
        )
        return {int(k): wire.vector_from_bytes(v) for k, v in reply.vectors.items()}

    def copy_cosines(
        self,
        cids: Sequence[int],
        principal: Principal,
        limit: int,
        *,
        expand: float = 0.0,
    ) -> dict[int, Copies]:
        request = index_pb2.CopyCosinesRequest(
            cids=list(cids), principal=wire.principal_to_pb(principal), limit=limit, expand=expand
        )
        reply = self._caller.call(self._stub.CopyCosines, request, idempotent=True)
        return wire.copy_cosines_from_pb(reply.cosines)

    def chunks(self, cids: Sequence[int], principal: Principal | None = None) -> dict[int, Chunk]:
        who = _caller(principal, "chunks")
        if not cids:
            return {}
        reply = self._caller.call(
            self._stub.Chunks, index_pb2.ChunkIdsRequest(cids=list(cids), principal=who), idempotent=True
        )
        return {int(k): wire.chunk_from_pb(c) for k, c in reply.chunks.items()}

    def stats(self) -> dict[str, int]:
        reply = self._caller.call(self._stub.Stats, index_pb2.IndexStatsRequest(), idempotent=True)
        return {k: int(v) for k, v in reply.counts.items()}

    def close(self) -> None:
        """Close the channel (the remote index itself stays open: the retrieval service owns it)."""
        self._channel.close()


def _caller(principal: Principal | None, method: str) -> types_pb2.Principal:
    """The principal a read by id must carry: the retrieval service answers only for what it may read."""
    if principal is None:
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT,
            f"RemoteIndex.{method} needs the caller's principal: the retrieval service returns only the "
            "chunks it may read; pass principal=",
            method=method,
        )
    return wire.principal_to_pb(principal)
