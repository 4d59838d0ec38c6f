"""Per-service authorisation of certificates (docs/security.md, "Who may call which service"): real
gRPC servers on loopback with mTLS from the dev CA, each accepting only the components of its
``allowed_callers``, identified by the client certificate's CN.

A toy Rampart service stands in for the handlers (a method under ``/rampart.``, as every real one is),
so these run without models; ``test_service_auth.py`` runs the real retrieval and ingest processes
with their default allow-lists.
"""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from prometheus_client import REGISTRY
from pydantic import SecretStr

from services.common.config import (
    GrpcServerSettings,
    RemoteSettings,
    RetrievalServiceSettings,
    ServiceTlsSettings,
)
from services.common.dev_certs import SERVICE_NAMES, DevCerts, make_dev_certs
from services.common.errors import ErrorCode, RampartError
from services.common.grpc_client import Caller, open_channel
from services.common.grpc_server import GrpcServer
from services.common.net import free_port
from services.common.service_auth import ServiceAuth
from services.ingest.config import IngestServiceSettings
from tests.integration.grpc_servers import BackgroundLoop

pytestmark = pytest.mark.integration

TOKEN = "caller-authz-token"
PING = "/rampart.test.v1.Toy/Ping"
SETTING = "RAMPART_RETRIEVAL_SERVICE__ALLOWED_CALLERS"


def auth_of(certs: DevCerts, name: str | None) -> ServiceAuth:
    """``name``'s certificate and the token (``None``: TLS with the CA but no certificate of its own)."""
    if name is None:
        return ServiceAuth(token=TOKEN)
    tls = ServiceTlsSettings(
        enabled=True, ca_file=certs.ca, cert_file=certs.cert(name), key_file=certs.key(name)
    )
    return ServiceAuth.from_settings(RemoteSettings(internal_token=SecretStr(TOKEN), tls=tls))


class Toy:
    """A GrpcServer named ``name`` serving ``/rampart.test.v1.Toy/Ping`` with ``settings``."""

    def __init__(
        self, certs: DevCerts, name: str, settings: GrpcServerSettings, auth: ServiceAuth | None = None
    ) -> None:
        async def ping(request: bytes, context: grpc.aio.ServicerContext) -> bytes:
            return b"pong"

        handler = grpc.method_handlers_generic_handler(
            "rampart.test.v1.Toy", {"Ping": grpc.unary_unary_rpc_method_handler(ping)}
        )
        self.loop = BackgroundLoop()
        self.server = GrpcServer(settings, name=name, auth=auth or auth_of(certs, name))
        self.server.add(lambda h, s: s.add_generic_rpc_handlers((h,)), handler, "rampart.test.v1.Toy")
        port = self.loop.run(self.server.start())
        self.loop.run(self.server.set_serving())
        self.address = f"127.0.0.1:{port}"

    def ping(self, certs: DevCerts, caller: str | None) -> bytes:
        channel = open_channel(self.address, auth=auth_of(certs, caller))
        try:
            return bytes(
                Caller(channel, self.address, deadline_ms=5000).call(
                    channel.unary_unary(PING), b"", idempotent=True
                )
            )
        finally:
            channel.close()

    def close(self) -> None:
        self.loop.run(self.server.stop(0))
        self.loop.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> DevCerts:
    return make_dev_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def retrieval(certs: DevCerts) -> Iterator[Toy]:
    """A server with retrieval's name and default allow-list (orchestrator, ingest)."""
    toy = Toy(certs, "retrieval", RetrievalServiceSettings(port=free_port()))
    yield toy
    toy.close()


def test_the_dev_ca_issues_one_identity_per_component(certs: DevCerts) -> None:
    """The identity a server checks is the certificate's CN: the component's name, one per name."""
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    for name in SERVICE_NAMES:
        cert = x509.load_pem_x509_certificate(certs.cert(name).read_bytes())
        assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)] == [name]


@pytest.mark.parametrize("caller", ["orchestrator", "ingest"])
def test_allowed_callers_pass(retrieval: Toy, certs: DevCerts, caller: str) -> None:
    assert retrieval.ping(certs, caller) == b"pong"


@pytest.mark.parametrize("caller", ["gateway", "client", "retrieval"])
def test_another_components_certificate_is_refused_naming_it_and_the_setting(
    retrieval: Toy, certs: DevCerts, caller: str
) -> None:
    """A certificate of the same CA, so past the handshake and the token, but of a component that has
    no edge to retrieval: PERMISSION_DENIED, with its identity and the variable to change."""
    labels = {"service": "retrieval", "method": "Ping", "code": "permission_denied"}
    before = REGISTRY.get_sample_value("rampart_requests_total", labels) or 0
    with pytest.raises(RampartError) as err:
        retrieval.ping(certs, caller)
    assert err.value.code is ErrorCode.PERMISSION_DENIED
    assert err.value.details == {"caller": caller, "allowed": ["orchestrator", "ingest"], "setting": SETTING}
    assert repr(caller) in err.value.message and SETTING in err.value.message
    assert (REGISTRY.get_sample_value("rampart_requests_total", labels) or 0) - before == 1


def test_the_refusal_is_the_grpc_status_permission_denied(retrieval: Toy, certs: DevCerts) -> None:
    """What a client of another language sees: the status code itself, not only Rampart's details."""
    channel = open_channel(retrieval.address, auth=auth_of(certs, "gateway"))
    with pytest.raises(grpc.RpcError) as err:
        channel.unary_unary(PING)(b"", timeout=5)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "'gateway'" in (err.value.details() or "")
    channel.close()


def test_no_certificate_is_refused_at_the_handshake(retrieval: Toy, certs: DevCerts) -> None:
    """TLS trusting the CA, with the token, but no client certificate: no identity, no connection."""
    channel = grpc.secure_channel(
        retrieval.address,
        grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes()),
        options=[("grpc.ssl_target_name_override", "localhost")],
    )
    with pytest.raises(grpc.RpcError) as err:
        channel.unary_unary(PING)(b"", timeout=5, metadata=(("x-rampart-internal-token", TOKEN),))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    channel.close()


def test_health_stays_open_to_every_certificate_of_the_ca(retrieval: Toy, certs: DevCerts) -> None:
    """Health tells SERVING or not; the allow-list guards the RPCs that carry data."""
    channel = open_channel(retrieval.address, auth=auth_of(certs, "gateway"))
    reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING
    channel.close()


def test_ingest_admits_the_gateway_only(certs: DevCerts) -> None:
    toy = Toy(certs, "ingest", IngestServiceSettings(port=free_port()))
    try:
        assert toy.ping(certs, "gateway") == b"pong"
        for caller in ("orchestrator", "client"):
            with pytest.raises(RampartError) as err:
                toy.ping(certs, caller)
            assert err.value.code is ErrorCode.PERMISSION_DENIED
            assert err.value.details["setting"] == "RAMPART_INGEST_SERVICE__ALLOWED_CALLERS"
    finally:
        toy.close()


def test_the_allow_list_is_a_setting(certs: DevCerts) -> None:
    """An operator's tool with the dev CA's ``client`` certificate, added to the list; ``*`` admits
    every certificate of the CA (the generic server's default)."""
    only_client = ["client"]  # the role lists must stay inside the gate (test_caller_roles.py)
    added = Toy(
        certs,
        "retrieval",
        RetrievalServiceSettings(
            port=free_port(), allowed_callers=only_client, read_callers=only_client, write_callers=only_client
        ),
    )
    anyone = Toy(certs, "retrieval", GrpcServerSettings(port=free_port()))
    try:
        assert added.ping(certs, "client") == b"pong"
        with pytest.raises(RampartError):
            added.ping(certs, "orchestrator")
        assert all(anyone.ping(certs, name) == b"pong" for name in SERVICE_NAMES)
    finally:
        added.close()
        anyone.close()


def test_without_mtls_the_list_is_not_checked(certs: DevCerts) -> None:
    """The token alone names no component: every holder is alike (docs/security.md says so)."""
    toy = Toy(certs, "retrieval", RetrievalServiceSettings(port=free_port()), auth=ServiceAuth(TOKEN))
    try:
        assert toy.ping(certs, None) == b"pong"
        assert "callers" not in toy.server._security()
    finally:
        toy.close()


@pytest.mark.parametrize("bad", [[], [""], ["*", "gateway"]])
def test_a_bad_allow_list_is_refused_with_the_fix(bad: list[str]) -> None:
    with pytest.raises(ValueError, match="allowed_callers"):
        RetrievalServiceSettings(allowed_callers=bad)
