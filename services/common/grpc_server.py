"""An async gRPC server with what every Rampart service needs: health, authentication, errors,
deadlines, and reflection when asked for (``reflection``; off by default).

Who may call is decided here, from a :class:`~services.common.service_auth.ServiceAuth`: mTLS on the
port and the deployment token checked before any handler (see that module); a server bound to a
non-loopback host with neither refuses to start.

Errors are mapped once, here: a handler raises :class:`RampartError` and the caller gets the status
from ``GRPC_STATUS`` with a rich ``google.rpc.Status`` whose ``ErrorInfo`` carries the ``ErrorCode``
(``reason``) and the details (JSON values in ``metadata``), which
:func:`services.common.grpc_client.error_from_rpc` turns back into the same ``RampartError``. Any other
exception becomes ``INTERNAL`` with a generic message (the traceback stays in the server log).

The caller's deadline is put in a contextvar for the handler: :func:`remaining_s` tells how long is
left and the client helpers cap their own deadlines with it, so a deadline propagates across hops.
Blocking work goes to a thread with :func:`run_blocking`, which carries that context along.

Usage (a service's ``__main__``; see ``services/retrieval/server.py``)::

    server = GrpcServer(settings.retrieval_service, name="retrieval",
                        auth=ServiceAuth.from_settings(settings.remote))
    server.add(retrieval_pb2_grpc.add_RetrievalServiceServicer_to_server, servicer,
               retrieval_pb2.DESCRIPTOR.services_by_name["RetrievalService"])
    server.on_stop(index.close)              # runs after in-flight RPCs finished
    port = await server.start()              # binds host:port, health NOT_SERVING
    await server.set_serving()               # dependencies ready: health SERVING for every service
    await server.serve_until_signal()        # SIGTERM/SIGINT: NOT_SERVING, grace_s drain, on_stop
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import json
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.protobuf.descriptor import ServiceDescriptor
from google.rpc import error_details_pb2, status_pb2
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.common.config import GrpcServerSettings
from services.common.errors import GRPC_STATUS, ErrorCode, RampartError
from services.common.metrics import record_request
from services.common.service_auth import (
    RAMPART_METHODS,
    CallerPolicy,
    MethodCallers,
    ServiceAuth,
    caller_identity,
    check_exposure,
)

log = logging.getLogger(__name__)

ERROR_DOMAIN = "rampart"
"""``ErrorInfo.domain`` of errors raised by Rampart services (others are not ``RampartError``)."""
STATUS_DETAILS_KEY = "grpc-status-details-bin"

T = TypeVar("T")

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "rampart_grpc_deadline", default=None
)


def remaining_s() -> float | None:
    """Seconds left of the deadline of the RPC being served (``None``: no RPC, or no deadline)."""
    deadline = _deadline.get()
    return None if deadline is None else deadline - time.monotonic()


def set_deadline(seconds: float | None) -> contextvars.Token[float | None]:
    """Make ``seconds`` from now the propagated deadline (tests; callers outside an RPC)."""
    return _deadline.set(None if seconds is None else time.monotonic() + seconds)


async def run_blocking(executor: Executor | None, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run blocking ``fn`` on ``executor`` (a bounded pool) with this task's context (the deadline)."""
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, fn, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(executor, call)


def status_of(exc: RampartError) -> tuple[grpc.StatusCode, str, bytes]:
    """``(code, message, google.rpc.Status bytes)`` for ``exc``: the one RampartError -> gRPC mapping."""
    code = grpc.StatusCode[GRPC_STATUS[exc.code]]
    info = error_details_pb2.ErrorInfo(
        reason=exc.code.value,
        domain=ERROR_DOMAIN,
        metadata={k: json.dumps(v, default=str) for k, v in exc.details.items()},
    )
    detail = any_pb2.Any()
    detail.Pack(info)
    status = status_pb2.Status(code=code.value[0], message=exc.message, details=[detail])
    return code, exc.message, status.SerializeToString()


async def _abort(context: grpc.aio.ServicerContext, exc: BaseException, method: str) -> None:
    if not isinstance(exc, RampartError):
        log.exception("unhandled error in %s", method, exc_info=exc)
        exc = RampartError(
            ErrorCode.INTERNAL, f"internal error in {method}; the server log has the cause", method=method
        )
    code, message, status = status_of(exc)
    await context.abort(code, message, trailing_metadata=((STATUS_DETAILS_KEY, status),))


class ErrorInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Maps exceptions to statuses (see the module doc), publishes the caller's deadline, and counts
    each unary RPC by outcome code (``rampart_requests_total{service,method,code}``) with its latency."""

    def __init__(self, service: str = "grpc") -> None:
        self.service = service

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        method: str = details.method
        # Rampart's own RPCs only (all unary): health (whose Watch streams from a coroutine) and
        # reflection are the gRPC library's, with their own statuses, and would skew the RPC metrics.
        if handler is None or not method.startswith(RAMPART_METHODS) or not handler.unary_unary:
            return handler
        return grpc.unary_unary_rpc_method_handler(
            self._unary(handler.unary_unary, method, self.service),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    @staticmethod
    def _unary(behavior: Callable[..., Any], method: str, service: str) -> Callable[..., Awaitable[Any]]:
        name = method.rsplit("/", 1)[-1]  # "/rampart.x.v1.Service/Method" -> a closed set of labels

        async def wrapped(request: Any, context: grpc.aio.ServicerContext) -> Any:
            _deadline.set(_absolute(context.time_remaining()))
            started = time.perf_counter()
            code = "ok"
            try:
                return await behavior(request, context)
            except grpc.aio.AbortError:
                code = "aborted"
                raise
            except asyncio.CancelledError:  # the caller cancelled or its deadline passed
                code = ErrorCode.DEADLINE_EXCEEDED.value
                raise
            except Exception as exc:
                code = exc.code.value if isinstance(exc, RampartError) else ErrorCode.INTERNAL.value
                await _abort(context, exc, method)
            finally:
                record_request(service, name, code, time.perf_counter() - started)

        return wrapped


class CallerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses Rampart RPCs from certificates outside the server's ``allowed_callers``:
    ``PERMISSION_DENIED`` with an ``ErrorInfo`` (reason ``permission_denied``; ``caller``, ``allowed``,
    ``setting``), counted as ``rampart_requests_total{code="permission_denied"}``. The identity exists
    only inside the call (``auth_context``), so the handler is wrapped rather than replaced; health and
    reflection stay as the token interceptor leaves them."""

    def __init__(self, policy: CallerPolicy) -> None:
        self._policy = policy

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        method: str = details.method
        if handler is None or not method.startswith(RAMPART_METHODS) or self._policy.open:
            return handler
        if not handler.unary_unary:  # Rampart's RPCs are all unary; refuse what this cannot guard
            return _unguardable(handler, method)
        return grpc.unary_unary_rpc_method_handler(
            self._guard(handler.unary_unary, method),
            request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )

    def _guard(self, behavior: Callable[..., Any], method: str) -> Callable[..., Awaitable[Any]]:
        policy = self._policy

        async def guarded(request: Any, context: grpc.aio.ServicerContext) -> Any:
            refused = policy.refusal(caller_identity(context), method)
            if refused is None:
                return await behavior(request, context)
            record_request(policy.service, method.rsplit("/", 1)[-1], refused.code.value)
            code, message, status = status_of(refused)
            await context.abort(code, message, trailing_metadata=((STATUS_DETAILS_KEY, status),))

        return guarded


def _unguardable(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """A streaming Rampart RPC (none exists): refused rather than served unchecked."""
    message = f"{method}: a streaming RPC cannot be checked against allowed_callers; make it unary"

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, message)

    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(refuse)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(refuse)
    return grpc.stream_stream_rpc_method_handler(refuse)


def _absolute(remaining: float | None) -> float | None:
    return None if remaining is None else time.monotonic() + remaining


class GrpcServer:
    """One ``grpc.aio`` server for one Rampart service process (see the module doc for usage)."""

    def __init__(
        self,
        settings: GrpcServerSettings,
        *,
        name: str,
        auth: ServiceAuth | None = None,
        method_callers: Sequence[MethodCallers] = (),
    ) -> None:
        """``method_callers``: narrower caller lists for some RPCs than ``settings.allowed_callers``
        (checked with mTLS only, as the list itself)."""
        self.settings = settings
        self.name = name
        self.auth = auth or ServiceAuth()
        self.method_callers = tuple(method_callers)
        self.port: int | None = None
        self.health_port: int | None = None
        self._health_server: grpc.aio.Server | None = None
        self._registrations: list[tuple[Callable[[Any, grpc.aio.Server], None], object, str]] = []
        self._stop_callbacks: list[Callable[[], object]] = []
        self._health = health.aio.HealthServicer()
        self._server: grpc.aio.Server | None = None
        self._stopping = asyncio.Event()

    def add(
        self,
        register: Callable[[Any, grpc.aio.Server], None],
        servicer: object,
        service: ServiceDescriptor | str,
    ) -> None:
        """Register ``servicer`` with its generated ``add_*Servicer_to_server`` (before :meth:`start`).

        ``service`` (its descriptor, or full name for a generic handler) names it for health and
        reflection.
        """
        name = service if isinstance(service, str) else service.full_name
        self._registrations.append((register, servicer, name))

    def on_stop(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` (sync, or returning an awaitable) after the server drained, in order."""
        self._stop_callbacks.append(callback)

    @property
    def service_names(self) -> list[str]:
        return [full_name for _, _, full_name in self._registrations]

    async def start(self) -> int:
        """Bind ``host:port`` (TLS and the token per ``auth``), start serving with health NOT_SERVING;
        returns the bound port. Refuses a non-loopback host with neither mTLS nor the token."""
        check_exposure(self.auth, self.settings.host, what=f"the {self.name} gRPC server")
        size = self.settings.max_message_bytes
        server = grpc.aio.server(
            # the token first: a refused call reaches neither a handler nor the RPC metrics; then
            # which component calls (mTLS only: the identity is the certificate's)
            interceptors=[
                *self.auth.server_interceptors(self.name),
                *self._caller_check(),
                ErrorInterceptor(self.name),
            ],
            maximum_concurrent_rpcs=self.settings.max_concurrent_rpcs,
            options=[
                ("grpc.max_send_message_length", size),
                ("grpc.max_receive_message_length", size),
                # Accept the clients' keepalive pings (grpc_client.py) instead of answering GOAWAY.
                ("grpc.keepalive_permit_without_calls", 1),
                ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
                ("grpc.so_reuseport", 0),
            ],
        )
        for register, servicer, _ in self._registrations:
            register(servicer, server)
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        if self.settings.reflection:
            reflection.enable_server_reflection(
                [
                    *self.service_names,
                    health_pb2.DESCRIPTOR.services_by_name["Health"].full_name,
                    reflection.SERVICE_NAME,
                ],
                server,
            )
        for full_name in ["", *self.service_names]:
            await self._health.set(full_name, health_pb2.HealthCheckResponse.NOT_SERVING)
        port = self._bind(server, self.settings.port, self.auth.server_credentials())
        await server.start()
        self._server, self.port = server, port
        if self.settings.health_port:
            await self._start_health()
        log.info(
            "%s gRPC server listening on %s:%d (%s)", self.name, self.settings.host, port, self._security()
        )
        return port

    @property
    def caller_policy(self) -> CallerPolicy:
        """``allowed_callers`` of this server, with the variable that sets them (named in refusals)."""
        return CallerPolicy(
            self.name,
            tuple(self.settings.allowed_callers),
            f"RAMPART_{self.name.upper()}_SERVICE__ALLOWED_CALLERS",
            self.method_callers,
        )

    def _caller_check(self) -> list[grpc.aio.ServerInterceptor]:
        """Without mTLS there is no identity to check: the token admits every holder alike."""
        policy = self.caller_policy
        return [CallerInterceptor(policy)] if self.auth.tls is not None and not policy.open else []

    def _security(self) -> str:
        parts = [p for p, on in (("mTLS", self.auth.tls), ("token", self.auth.token)) if on]
        if self.auth.tls is not None:
            parts.append("callers: " + ", ".join(self.settings.allowed_callers))
            if not self.caller_policy.open:
                parts.extend(
                    f"{rule.setting.rsplit('__', 1)[-1].lower()}: {', '.join(rule.allowed)}"
                    for rule in self.method_callers
                )
        return " + ".join(parts) if parts else "plaintext, no token"

    def _bind(self, server: grpc.aio.Server, port: int, credentials: grpc.ServerCredentials | None) -> int:
        address = f"{self.settings.host}:{port}"
        try:  # grpc raises when it cannot bind (it never returns port 0)
            if credentials is None:
                return int(server.add_insecure_port(address))
            return int(server.add_secure_port(address, credentials))
        except RuntimeError as exc:
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"cannot bind the {self.name} gRPC server to {address} ({exc}); is the port in use? "
                f"set another port in its settings",
                address=address,
            ) from exc

    async def _start_health(self) -> None:
        """The plaintext health-only port (``health_port``): the same health states, nothing else."""
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        self.health_port = self._bind(server, self.settings.health_port, None)
        await server.start()
        self._health_server = server

    async def set_serving(self, serving: bool = True) -> None:
        """Health of every registered service (and ``""``, the whole server): SERVING or NOT_SERVING."""
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        for full_name in ["", *self.service_names]:
            await self._health.set(full_name, status)

    async def stop(self, grace_s: float | None = None) -> None:
        """NOT_SERVING, refuse new RPCs, let in-flight ones finish within ``grace_s``, then on_stop."""
        server, self._server = self._server, None
        if server is None:
            return
        await self._health.enter_graceful_shutdown()
        grace = self.settings.grace_s if grace_s is None else grace_s
        log.info("%s gRPC server stopping (grace %.1fs)", self.name, grace)
        await server.stop(grace)
        if self._health_server is not None:
            await self._health_server.stop(0)
            self._health_server = None
        for callback in self._stop_callbacks:
            result = callback()
            if asyncio.iscoroutine(result):
                await result

    def request_stop(self) -> None:
        """Ask :meth:`serve_until_signal` to stop (what SIGTERM/SIGINT do)."""
        self._stopping.set()

    async def serve_until_signal(self) -> None:
        """Serve until SIGTERM/SIGINT (or :meth:`request_stop`), then stop gracefully."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop)
        try:
            await self._stopping.wait()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await self.stop()
