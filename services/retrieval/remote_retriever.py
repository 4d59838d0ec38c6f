"""``RemoteRetriever``: the ``Retriever`` protocol as a gRPC client of the retrieval service.

The search pipeline cannot tell it from :class:`HybridRetriever`: same params, same hits and scores,
and failures as the same ``RampartError`` (an invalid query is ``INVALID_ARGUMENT`` either way; a down
service is ``UNAVAILABLE``, a slow one ``DEADLINE_EXCEEDED``). Searches are reads: they retry on
``UNAVAILABLE`` within the deadline. Nothing connects until the first call.
"""

from __future__ import annotations

import grpc
from rampart.retrieval.v1 import retrieval_pb2, retrieval_pb2_grpc

from services.common import wire
from services.common.config import RemoteSettings
from services.common.grpc_client import (
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_RETRY_WINDOW_MS,
    Caller,
    check_ready,
    open_channel,
)
from services.common.service_auth import ServiceAuth
from services.common.types import Principal
from services.retrieval.hybrid import SearchOutcome, SearchParams

RETRIEVAL_SERVICE = "rampart.retrieval.v1.RetrievalService"


class RemoteRetriever:
    def __init__(
        self,
        channel: grpc.Channel,
        address: str,
        *,
        deadline_ms: int,
        retry_window_ms: int = DEFAULT_RETRY_WINDOW_MS,
    ) -> None:
        self.address = address
        self._channel = channel
        self._stub = retrieval_pb2_grpc.RetrievalServiceStub(channel)
        self._caller = Caller(channel, address, deadline_ms=deadline_ms, retry_window_ms=retry_window_ms)

    @classmethod
    def connect(
        cls, address: str, settings: RemoteSettings, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ) -> RemoteRetriever:
        """A client of the retrieval service at ``address``; each search gets ``settings.deadline_ms``;
        ``max_message_bytes`` should be the server's (``retrieval_service.max_message_bytes``)."""
        return cls(
            open_channel(
                address, max_message_bytes=max_message_bytes, auth=ServiceAuth.from_settings(settings)
            ),
            address,
            deadline_ms=settings.deadline_ms,
            retry_window_ms=settings.retry_window_ms,
        )

    def search(self, query: str, principal: Principal, params: SearchParams) -> SearchOutcome:
        request = wire.search_request_to_pb(query, principal, params)
        reply = self._caller.call(self._stub.Search, request, idempotent=True)
        return wire.outcome_from_pb(reply)

    def stats(self) -> dict[str, int]:
        reply = self._caller.call(self._stub.Stats, retrieval_pb2.StatsRequest(), idempotent=True)
        return {k: int(v) for k, v in reply.counts.items()}

    def check_ready(self, timeout_s: float = 1.0) -> bool:
        """Whether the retrieval service reports ``RetrievalService`` SERVING (its index is open)."""
        return check_ready(self._channel, RETRIEVAL_SERVICE, timeout_s=timeout_s)

    def close(self) -> None:
        self._channel.close()
