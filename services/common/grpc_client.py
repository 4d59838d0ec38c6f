"""Calling Rampart gRPC services: channels, deadlines, retries, and errors mapped back to RampartError.

A remote stage must fail exactly like the local one: :func:`error_from_rpc` rebuilds the
``RampartError`` the server raised (code, message, details) from the status' ``ErrorInfo``
(see :mod:`services.common.grpc_server`); statuses without one (the server unreachable, a deadline)
become ``UNAVAILABLE`` / ``DEADLINE_EXCEEDED`` / … naming the address.

Usage (see ``services/retrieval/remote_index.py``)::

    channel = open_channel("127.0.0.1:50051", auth=ServiceAuth.from_settings(settings.remote))  # lazy
    caller = Caller(channel, "127.0.0.1:50051", deadline_ms=settings.remote.deadline_ms)
    stub = index_pb2_grpc.IndexServiceStub(channel)
    reply = caller.call(stub.Stats, index_pb2.IndexStatsRequest(), idempotent=True)
    check_ready(channel, "rampart.retrieval.v1.IndexService")   # health probe -> bool

Deadline of each call: the smaller of ``deadline_ms`` and what is left of the deadline of the RPC being
served (:func:`services.common.grpc_server.remaining_s`), so a deadline propagates across hops.
Retries (tenacity, exponential backoff, within that same deadline) happen on ``UNAVAILABLE`` only and
only for calls marked idempotent: a write whose reply was lost is never silently sent twice. They go
on for ``remote.retry_window_ms`` (3 s) and at least :data:`ATTEMPTS` tries: a server restarting
(supervisord brings a killed one back in ~2.5 s; a rescheduled pod) is ridden over instead of failing
every request of those seconds (``rampart bench faults`` measured 34 × 503 in a retrieval restart with
three quick tries). A server that stays down costs each call that window before ``UNAVAILABLE``.
The channel retries its connection every second at most (:data:`MAX_RECONNECT_BACKOFF_MS`; gRPC's
default backs off to two minutes), so a restarted server is reached within the window.
"""

from __future__ import annotations

import ipaddress
import json
import time
from typing import Any, TypeVar

import grpc
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_status import rpc_status
from tenacity import (
    Retrying,
    retry_if_exception,
    retry_never,
    stop_after_attempt,
    stop_after_delay,
    stop_all,
    stop_any,
    wait_exponential,
)

from services.common.config import GrpcServerSettings
from services.common.errors import GRPC_STATUS, ErrorCode, RampartError
from services.common.grpc_server import ERROR_DOMAIN, remaining_s
from services.common.service_auth import ServiceAuth

R = TypeVar("R")

DEFAULT_MAX_MESSAGE_BYTES: int = GrpcServerSettings.model_fields[
    "max_message_bytes"
].default  # the servers' default
KEEPALIVE_MS = 30_000  # ping an idle connection so a dead peer is noticed before the next call
ATTEMPTS = 3  # idempotent calls: tries on UNAVAILABLE at least, within the call's deadline
BACKOFF_S = 0.05  # first wait between them (exponential, at most MAX_BACKOFF_S)
MAX_BACKOFF_S = 0.5
DEFAULT_RETRY_WINDOW_MS = 3000  # remote.retry_window_ms's default, for callers built without settings
INITIAL_RECONNECT_BACKOFF_MS = 100
MAX_RECONNECT_BACKOFF_MS = 1000
_BY_GRPC_NAME: dict[str, ErrorCode] = {}
for _code, _name in GRPC_STATUS.items():
    _BY_GRPC_NAME.setdefault(_name, _code)


def channel_target(address: str) -> tuple[str, bool]:
    """The gRPC target for ``address`` and whether calls are spread over several servers.

    - ``host:port``: one server;
    - ``10.0.0.5:50051,10.0.0.6:50051`` (IPv4 literals): client-side round robin over those replicas
      (gRPC's ``ipv4:`` resolver), each call to the next one that is connected — a replica that died
      is skipped until it is back;
    - ``dns:///retrieval:50051``: round robin over every address the name resolves to (a Kubernetes
      headless Service), re-resolved when a connection drops.
    """
    if address.startswith("dns:"):
        return address, True
    parts = [p.strip() for p in (address or "").split(",")]
    for part in parts:
        host, _, port = part.rpartition(":")
        if not host or not port.isdigit():
            raise RampartError(
                ErrorCode.INVALID_ARGUMENT,
                f"gRPC address {part!r} (in {address!r}) is not host:port; set e.g. "
                "RAMPART_REMOTE__RETRIEVAL_ADDRESS=127.0.0.1:50051 (replicas: a comma-separated list of "
                "IPv4 host:port, or dns:///name:port)",
                address=address,
            )
    if len(parts) == 1:
        return parts[0], False
    for part in parts:
        host = part.rpartition(":")[0]
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise RampartError(
                ErrorCode.INVALID_ARGUMENT,
                f"gRPC address list {address!r} names {host!r}, which is not an IPv4 address; a list balances "
                "over IPv4 literals only: list their IPs, or give one name resolving to every replica as "
                "dns:///name:port",
                address=address,
            ) from None
    return "ipv4:" + ",".join(parts), True


def open_channel(
    address: str, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES, auth: ServiceAuth | None = None
) -> grpc.Channel:
    """A channel to ``address`` (:func:`channel_target`: one server, or round robin over replicas);
    connects lazily on the first call. With ``auth``: TLS presenting this process's certificate when
    ``remote.tls`` is on, and the deployment token on every call when one is set."""
    target, balanced = channel_target(address)
    auth = auth or ServiceAuth()
    options = [
        *([("grpc.lb_policy_name", "round_robin")] if balanced else []),
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.keepalive_time_ms", KEEPALIVE_MS),
        ("grpc.keepalive_timeout_ms", 10_000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.enable_retries", 0),  # tenacity retries, with our own rules
        ("grpc.initial_reconnect_backoff_ms", INITIAL_RECONNECT_BACKOFF_MS),
        ("grpc.max_reconnect_backoff_ms", MAX_RECONNECT_BACKOFF_MS),
        *auth.channel_options(_replica_hosts(target)),
    ]
    credentials = auth.channel_credentials()
    if credentials is None:
        channel = grpc.insecure_channel(target, options=options)
    else:
        channel = grpc.secure_channel(target, credentials, options=options)
    interceptors = auth.client_interceptors()
    return grpc.intercept_channel(channel, *interceptors) if interceptors else channel


def _replica_hosts(target: str) -> list[str] | None:
    """The hosts of an ``ipv4:`` list target (:func:`channel_target`), ``None`` for any other."""
    if not target.startswith("ipv4:"):
        return None
    return [part.rpartition(":")[0] for part in target.removeprefix("ipv4:").split(",")]


def error_from_rpc(exc: grpc.RpcError, *, address: str, method: str) -> RampartError:
    """The ``RampartError`` a failed call stands for (the server's own, when it sent one)."""
    status = rpc_status.from_call(exc) if isinstance(exc, grpc.Call) else None
    if status is not None:
        for detail in status.details:
            if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
                info = error_details_pb2.ErrorInfo()
                detail.Unpack(info)
                if info.domain == ERROR_DOMAIN and info.reason in ErrorCode._value2member_map_:
                    details = {k: _json_or_text(v) for k, v in info.metadata.items()}
                    return RampartError(ErrorCode(info.reason), status.message, **details)
    code: grpc.StatusCode = exc.code() if isinstance(exc, grpc.Call) else grpc.StatusCode.UNKNOWN
    text = (exc.details() or "") if isinstance(exc, grpc.Call) else str(exc)
    if code == grpc.StatusCode.UNAVAILABLE:
        return RampartError(
            ErrorCode.UNAVAILABLE,
            f"{method} at {address} is unavailable ({text}); is the service running and ready?",
            address=address,
            method=method,
        )
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return RampartError(
            ErrorCode.DEADLINE_EXCEEDED,
            f"{method} at {address} exceeded its deadline; raise the deadline (remote.deadline_ms) or "
            "look at the service's latency",
            address=address,
            method=method,
        )
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED and "concurrent rpc limit" in text.lower():
        return RampartError(
            ErrorCode.RATE_LIMITED,
            f"{method} at {address} refused: the server is at its max_concurrent_rpcs; retry later "
            "or add replicas",
            address=address,
            method=method,
        )
    mapped = _BY_GRPC_NAME.get(code.name, ErrorCode.INTERNAL)
    return RampartError(mapped, f"{method} at {address} failed: {code.name}: {text}", address=address)


def _json_or_text(value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError:
        return value


def _unavailable(exc: BaseException) -> bool:
    return isinstance(exc, grpc.Call) and exc.code() == grpc.StatusCode.UNAVAILABLE


class Caller:
    """Makes unary calls on one channel with the deadline/retry/error rules of the module doc."""

    def __init__(
        self,
        channel: grpc.Channel,
        address: str,
        *,
        deadline_ms: int,
        retry_window_ms: int = DEFAULT_RETRY_WINDOW_MS,
    ) -> None:
        self.channel = channel
        self.address = address
        self.deadline_ms = deadline_ms
        self.retry_window_ms = retry_window_ms

    def timeout_s(self, deadline_ms: int | None = None) -> float:
        """This call's timeout: the configured one, capped by the propagated remaining deadline."""
        own = (deadline_ms if deadline_ms is not None else self.deadline_ms) / 1000
        left = remaining_s()
        return own if left is None else min(own, left)

    def call(
        self,
        method: Any,
        request: Any,
        *,
        idempotent: bool,
        deadline_ms: int | None = None,
    ) -> Any:
        """``method(request)`` (a stub's unary-unary multicallable) under the module's rules."""
        name = _method_name(method)
        timeout = self.timeout_s(deadline_ms)
        end = time.monotonic() + timeout
        refused: list[grpc.RpcError] = []  # the last UNAVAILABLE, for a retry the deadline cut short

        def attempt() -> Any:
            left = end - time.monotonic()
            if left <= 0:
                if refused:  # the server was unreachable until the deadline: say so, not "no time"
                    raise refused[-1]
                raise RampartError(
                    ErrorCode.DEADLINE_EXCEEDED,
                    f"{name} at {self.address}: no time left of the caller's deadline",
                    address=self.address,
                    method=name,
                )
            try:
                return method(request, timeout=left)
            except grpc.RpcError as exc:
                if _unavailable(exc):
                    refused.append(exc)
                raise

        # idempotent: until ATTEMPTS tries *and* the retry window are used up, never past the deadline
        enough = stop_all(stop_after_attempt(ATTEMPTS), stop_after_delay(self.retry_window_ms / 1000))
        retrying = Retrying(
            retry=retry_if_exception(_unavailable) if idempotent else retry_never,
            stop=stop_any(enough if idempotent else stop_after_attempt(1), stop_after_delay(timeout)),
            wait=wait_exponential(multiplier=BACKOFF_S, max=MAX_BACKOFF_S),
            reraise=True,
        )
        try:
            return retrying(attempt)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, address=self.address, method=name) from None


def _method_name(method: Any) -> str:
    raw = getattr(method, "_method", b"")
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    return text.rsplit("/", 1)[-1] or "call"


def check_ready(channel: grpc.Channel, service: str = "", *, timeout_s: float = 1.0) -> bool:
    """Whether ``service`` (a full service name; ``""``: the whole server) reports SERVING."""
    stub = health_pb2_grpc.HealthStub(channel)
    try:
        reply = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=timeout_s)
    except grpc.RpcError:
        return False
    return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
