"""Who may call a Rampart gRPC service: mutual TLS and the deployment's token (docs/security.md).

Without this, whoever reaches a service's port could call it: ``IndexService`` serves every tenant's
chunks to the process that owns nothing but an address. Two controls, each enough to keep a stranger
out, both on in ``rampart stack``:

- **mutual TLS** (``remote.tls``): the server presents its certificate and refuses, during the
  handshake, a client without one signed by the deployment's CA; the client checks the server's
  certificate the same way. Stops eavesdropping and impersonation on the network.
- **the deployment token** (``remote.internal_token``, the secret the orchestrator ingress already
  checks): every call carries it in ``x-rampart-internal-token``; a call without it, or with another,
  fails ``UNAUTHENTICATED`` before any handler runs. The minimum when mTLS is off.

Health (``grpc.health.v1``) needs no token: it tells only SERVING or not, and kubelet probes cannot
send one. A server bound to a non-loopback address with neither control refuses to start.

With mTLS, each server also checks *which* component calls (:class:`CallerPolicy`): the client
certificate's CN names it (``rampart certs dev`` and the chart issue one per component) and the
server's ``allowed_callers`` lists who may call its RPCs (retrieval: orchestrator and ingest; ingest:
the gateway). Without it a stolen gateway certificate would read every tenant's chunks from retrieval,
an edge the gateway never uses. Others get ``PERMISSION_DENIED`` naming their identity and the setting.

Usage (one place each: :class:`~services.common.grpc_server.GrpcServer` and
:func:`~services.common.grpc_client.open_channel` take a :class:`ServiceAuth`)::

    auth = ServiceAuth.from_settings(settings.remote)     # reads the PEM files once
    GrpcServer(settings.retrieval_service, name="retrieval", auth=auth)
    open_channel("127.0.0.1:50051", auth=auth)
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from services.common.config import ANY_CALLER, RemoteSettings, ServiceTlsSettings
from services.common.errors import ErrorCode, RampartError
from services.common.internal_auth import INTERNAL_TOKEN_HEADER
from services.common.metrics import record_request

HEALTH_METHODS = "/grpc.health.v1.Health/"  # open without the token (see the module doc)
RAMPART_METHODS = "/rampart."  # full method names of the services in proto/rampart


@dataclass(frozen=True, repr=False)
class TlsMaterial:
    """The PEM bytes of ``remote.tls`` (read once: a Secret rotated on disk takes a restart)."""

    ca: bytes
    cert: bytes
    key: bytes
    server_name: str | None = None

    @classmethod
    def read(cls, tls: ServiceTlsSettings) -> TlsMaterial:
        files = {"ca_file": tls.ca_file, "cert_file": tls.cert_file, "key_file": tls.key_file}
        got: dict[str, bytes] = {}
        for name, path in files.items():
            got[name] = read_pem(name, path)
        return cls(got["ca_file"], got["cert_file"], got["key_file"], tls.server_name)

    def __repr__(self) -> str:  # never the key
        return f"TlsMaterial(server_name={self.server_name!r})"


def read_pem(name: str, path: Path | None, group: str = "remote.tls") -> bytes:
    """The PEM file of setting ``group.name``; a missing, unreadable or non-PEM file is an error naming
    the variable (``RAMPART_REMOTE__TLS__CA_FILE``) and the fix, at start-up rather than as a handshake
    failure on the first call."""
    variable = "RAMPART_" + "__".join(part.upper() for part in (*group.split("."), name))
    if path is None:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"{group}.{name} is unset; set {variable} (`rampart certs dev --out DIR` makes a local set)",
            field=f"{group}.{name}",
        )
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"cannot read {group}.{name} {str(path)!r} ({exc.strerror}); fix {variable} or the mounted "
            "Secret",
            field=f"{group}.{name}",
        ) from None
    if b"-----BEGIN " not in data:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"{group}.{name} {str(path)!r} holds no PEM block; point {variable} at a PEM file",
            field=f"{group}.{name}",
        )
    return data


@dataclass(frozen=True, repr=False)
class ServiceAuth:
    """The credentials of one process, as server and as client; the default is none (loopback only)."""

    token: str | None = None
    tls: TlsMaterial | None = None

    @classmethod
    def from_settings(cls, remote: RemoteSettings) -> ServiceAuth:
        token = remote.internal_token.get_secret_value() if remote.internal_token else None
        tls = TlsMaterial.read(remote.tls) if remote.tls.enabled else None
        return cls(token=token or None, tls=tls)

    def __repr__(self) -> str:  # never the token
        return f"ServiceAuth(token={'set' if self.token else None}, tls={self.tls!r})"

    @property
    def any(self) -> bool:
        return self.token is not None or self.tls is not None

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """TLS that requires a client certificate signed by the CA (``None``: plaintext)."""
        if self.tls is None:
            return None
        return grpc.ssl_server_credentials(
            [(self.tls.key, self.tls.cert)], root_certificates=self.tls.ca, require_client_auth=True
        )

    def channel_credentials(self) -> grpc.ChannelCredentials | None:
        """TLS checking the server against the CA and presenting our certificate (``None``: plaintext)."""
        if self.tls is None:
            return None
        return grpc.ssl_channel_credentials(
            root_certificates=self.tls.ca, private_key=self.tls.key, certificate_chain=self.tls.cert
        )

    def channel_options(self, replicas: list[str] | None = None) -> list[tuple[str, Any]]:
        """The name the servers' certificates are checked against: ``server_name`` when set. A list of
        replicas (``replicas``: their hosts) has no name of its own (gRPC would check the whole list and
        fail), so it is checked against its one host (the stack: every replica on 127.0.0.1); replicas
        on several hosts need ``server_name``, a SAN on each one's certificate."""
        if self.tls is None:
            return []
        name = self.tls.server_name
        if name is None and replicas:
            hosts = sorted(set(replicas))
            if len(hosts) > 1:
                raise RampartError(
                    ErrorCode.FAILED_PRECONDITION,
                    f"mTLS to replicas on several hosts ({', '.join(hosts)}) needs the name their certificates "
                    "share: set RAMPART_REMOTE__TLS__SERVER_NAME to a SAN on each (or list one name as "
                    "dns:///name:port)",
                    field="remote.tls.server_name",
                )
            name = hosts[0]
        return [("grpc.ssl_target_name_override", name)] if name else []

    def server_interceptors(self, service: str = "grpc") -> list[grpc.aio.ServerInterceptor]:
        return [TokenServerInterceptor(self.token, service)] if self.token else []

    def client_interceptors(self) -> list[grpc.UnaryUnaryClientInterceptor]:
        return [TokenClientInterceptor(self.token)] if self.token else []


def is_loopback(host: str) -> bool:
    """Whether a bind address is reachable from this host only (``localhost``, 127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name, 0.0.0.0, ::: reachable from elsewhere


def check_exposure(auth: ServiceAuth, host: str, *, what: str) -> None:
    """Refuse to serve ``what`` on a non-loopback ``host`` with neither mTLS nor the token."""
    if auth.any or is_loopback(host):
        return
    raise RampartError(
        ErrorCode.FAILED_PRECONDITION,
        f"{what} would listen on {host!r}, reachable from other hosts, with no authentication: set "
        "RAMPART_REMOTE__INTERNAL_TOKEN (the deployment's token) and/or mTLS (RAMPART_REMOTE__TLS__ENABLED "
        "with its files), or bind 127.0.0.1",
        host=host,
    )


class TokenServerInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuses every call but health without the deployment token: ``UNAUTHENTICATED``, naming the
    header and the setting, before the handler (or the request's deserialisation) runs. Each refusal
    of a Rampart method is counted (``rampart_requests_total{code="unauthenticated"}``): a stranger
    probing the port, or a service with a stale token, shows on the dashboards."""

    def __init__(self, token: str, service: str = "grpc") -> None:
        self._expected = token.encode()
        self._service = service

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        method: str = details.method
        handler = await continuation(details)
        if handler is None or method.startswith(HEALTH_METHODS) or self._valid(details.invocation_metadata):
            return handler
        if method.startswith(RAMPART_METHODS):  # a served method: a closed set of labels
            record_request(self._service, method.rsplit("/", 1)[-1], ErrorCode.UNAUTHENTICATED.value)
        return _refusal(handler, method)

    def _valid(self, metadata: Any) -> bool:
        for key, value in metadata or ():
            if key == INTERNAL_TOKEN_HEADER:
                given = value.encode() if isinstance(value, str) else bytes(value)
                return hmac.compare_digest(given, self._expected)
        return False


def _refusal(handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
    """A handler of the same kind as ``handler`` that aborts ``UNAUTHENTICATED``; requests arrive as
    bytes, never parsed: a stranger's request costs no deserialisation."""
    message = (
        f"{method}: missing or wrong {INTERNAL_TOKEN_HEADER}; only the deployment's services may call "
        "(the caller needs the same remote.internal_token)"
    )

    async def refuse(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(refuse)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(refuse)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(refuse)
    return grpc.stream_stream_rpc_method_handler(refuse)


class _CallDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, base: grpc.ClientCallDetails, metadata: list[tuple[str, str]]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = base.wait_for_ready
        self.compression = base.compression


class TokenClientInterceptor(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor):  # type: ignore[misc]
    """Adds the deployment token to every call of a channel (Rampart's RPCs and health alike)."""

    def __init__(self, token: str) -> None:
        self._header = (INTERNAL_TOKEN_HEADER, token)

    def _details(self, details: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        return _CallDetails(details, [*(details.metadata or ()), self._header])

    def intercept_unary_unary(self, continuation: Any, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: grpc.ClientCallDetails, request: Any) -> Any:
        return continuation(self._details(details), request)


def caller_identity(context: grpc.aio.ServicerContext) -> str | None:
    """The CN of the caller's certificate as the TLS handshake verified it (``None``: no certificate,
    a plaintext port). gRPC exposes it as ``x509_common_name``; nothing is parsed from the request."""
    names = context.auth_context().get("x509_common_name") or []
    if not names:
        return None
    first = names[0]
    return first.decode(errors="replace") if isinstance(first, bytes) else str(first)


@dataclass(frozen=True)
class MethodCallers:
    """Who may call some of a server's RPCs (``methods``, full names such as
    ``/rampart.retrieval.v1.IndexService/Write``): ``allowed``, a narrower list than the server's;
    ``setting`` is the variable that sets it, named in refusals."""

    methods: frozenset[str]
    allowed: tuple[str, ...]
    setting: str

    def admits(self, identity: str | None) -> bool:
        return ANY_CALLER in self.allowed or (identity is not None and identity in self.allowed)


@dataclass(frozen=True)
class CallerPolicy:
    """Who may call one server's RPCs: ``allowed`` identities, ``setting`` the variable that lists them;
    ``methods``: narrower lists for some RPCs (the retrieval service's reads and writes). An open
    policy (``*``) checks nothing, the narrower lists included: no certificate names a component."""

    service: str
    allowed: tuple[str, ...]
    setting: str
    methods: tuple[MethodCallers, ...] = ()

    @property
    def open(self) -> bool:
        return ANY_CALLER in self.allowed

    def refusal(self, identity: str | None, method: str) -> RampartError | None:
        """``None`` when ``identity`` may call ``method``, else the error naming it and the fix."""
        if self.open:
            return None
        if identity is None or identity not in self.allowed:
            return self._refuse(identity, method, f"the {self.service} service", self.allowed, self.setting)
        for rule in self.methods:
            if method in rule.methods and not rule.admits(identity):
                name = method.rsplit("/", 1)[-1]
                return self._refuse(
                    identity, method, f"{name} on the {self.service} service", rule.allowed, rule.setting
                )
        return None

    @staticmethod
    def _refuse(
        identity: str | None, method: str, what: str, allowed: tuple[str, ...], setting: str
    ) -> RampartError:
        shown = repr(identity) if identity is not None else "no certificate identity (CN)"
        return RampartError(
            ErrorCode.PERMISSION_DENIED,
            f"{method}: the caller's certificate names {shown}, which may not call {what} "
            f"(allowed: {', '.join(allowed)}); if it should, add it to {setting}, or give the caller the "
            "certificate of an allowed component",
            caller=identity,
            allowed=list(allowed),
            setting=setting,
        )
