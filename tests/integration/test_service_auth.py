"""Service-to-service authentication on real gRPC servers on loopback (docs/security.md): mTLS with
certificates made at test time, the deployment token, reflection off by default, the plaintext
health-only port, and the refusal to serve a non-loopback address with neither control.

Every method of every Rampart gRPC service is called without credentials and must fail
``UNAUTHENTICATED`` before its handler runs (the requests are empty: a handler that ran would answer
``INVALID_ARGUMENT`` or succeed).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client import REGISTRY
from pydantic import SecretStr
from rampart.ingest.v1 import ingest_pb2
from rampart.links.v1 import links_pb2
from rampart.retrieval.v1 import index_pb2, retrieval_pb2

from services.common.config import (
    GrpcServerSettings,
    RemoteSettings,
    RetrievalServiceSettings,
    ServiceTlsSettings,
)
from services.common.dev_certs import DevCerts, make_dev_certs
from services.common.errors import ErrorCode, RampartError
from services.common.grpc_client import check_ready, open_channel
from services.common.grpc_server import GrpcServer
from services.common.internal_auth import INTERNAL_TOKEN_HEADER
from services.common.net import free_port
from services.common.service_auth import ServiceAuth
from services.common.types import Acl, Document, Principal
from services.ingest.remote_ingest import RemoteIngest
from services.retrieval.embedded_index import EmbeddedIndex
from services.retrieval.remote_index import RemoteIndex
from services.retrieval.server import RetrievalApp
from tests.integration.grpc_servers import BackgroundLoop
from tests.integration.ingest_servers import IngestStack

TOKEN = "test-deployment-token"
ALICE = Principal(tenant="acme", user="alice", groups=["eng"])
SERVICES = [
    ("rampart.retrieval.v1.IndexService", index_pb2.DESCRIPTOR.services_by_name["IndexService"]),
    ("rampart.links.v1.LinkService", links_pb2.DESCRIPTOR.services_by_name["LinkService"]),
    ("rampart.retrieval.v1.RetrievalService", retrieval_pb2.DESCRIPTOR.services_by_name["RetrievalService"]),
]


def remote(certs: DevCerts | None, name: str = "client", token: str | None = TOKEN) -> RemoteSettings:
    tls = (
        ServiceTlsSettings(
            enabled=True, ca_file=certs.ca, cert_file=certs.cert(name), key_file=certs.key(name)
        )
        if certs is not None
        else ServiceTlsSettings()
    )
    return RemoteSettings(internal_token=SecretStr(token) if token else None, tls=tls)


class Served:
    """The retrieval service (every service it registers) over a small embedded index, in-process."""

    def __init__(self, tmp: Path, embedder: object, auth: ServiceAuth, **server: object) -> None:
        self.loop = BackgroundLoop()
        # any certificate of the CA by default (the tests of the per-component lists pass their own)
        given: dict[str, object] = {"allowed_callers": ["*"], **server}
        self.settings = RetrievalServiceSettings(port=free_port(), **given)  # type: ignore[arg-type]
        self.address = f"127.0.0.1:{self.settings.port}"
        self.loop.run(self._start(tmp, embedder, auth))

    async def _start(self, tmp: Path, embedder: object, auth: ServiceAuth) -> None:
        self.index = EmbeddedIndex.open(tmp / "index", dim=embedder.dim)  # type: ignore[attr-defined]
        self.app = RetrievalApp(self.settings, self.index, embedder, auth=auth)  # type: ignore[arg-type]
        await self.app.start()

    def close(self) -> None:
        self.loop.run(self.app.stop(grace_s=0.5))
        self.loop.close()


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> DevCerts:
    return make_dev_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def mtls(tmp_path_factory: pytest.TempPathFactory, embedder: object, certs: DevCerts) -> Iterator[Served]:
    auth = ServiceAuth.from_settings(remote(certs, "retrieval"))
    served = Served(tmp_path_factory.mktemp("mtls"), embedder, auth, health_port=free_port())
    yield served
    served.close()


@pytest.fixture(scope="module")
def token_only(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> Iterator[Served]:
    served = Served(tmp_path_factory.mktemp("token"), embedder, ServiceAuth.from_settings(remote(None)))
    yield served
    served.close()


def call_every_method(channel: grpc.Channel, metadata: tuple[tuple[str, str], ...] = ()) -> dict[str, str]:
    """Each method of each service with an empty request: ``{method: status code name}``."""
    got: dict[str, str] = {}
    for full, descriptor in SERVICES:
        for method in descriptor.methods:
            call = channel.unary_unary(
                f"/{full}/{method.name}",
                request_serializer=empty_pb2.Empty.SerializeToString,
                response_deserializer=lambda b: b,
            )
            try:
                call(empty_pb2.Empty(), timeout=5, metadata=metadata)
                got[method.full_name] = "OK"
            except grpc.RpcError as exc:
                got[method.full_name] = exc.code().name
    return got


def test_calls_without_the_token_fail_unauthenticated(token_only: Served) -> None:
    counted = REGISTRY.get_sample_value(
        "rampart_requests_total", {"service": "retrieval", "method": "Chunks", "code": "unauthenticated"}
    )
    with grpc.insecure_channel(token_only.address) as channel:
        refused = call_every_method(channel)
        wrong = call_every_method(channel, ((INTERNAL_TOKEN_HEADER, "not-the-token"),))
        assert len(refused) >= 15  # IndexService's 15, Named, Search, Stats
        assert set(refused.values()) == {"UNAUTHENTICATED"}, refused
        assert set(wrong.values()) == {"UNAUTHENTICATED"}, wrong
        now = REGISTRY.get_sample_value(
            "rampart_requests_total", {"service": "retrieval", "method": "Chunks", "code": "unauthenticated"}
        )
        assert (now or 0) - (counted or 0) == 2  # each refusal counted: strangers show on dashboards
        # with it, the same empty requests reach the handlers (which refuse or answer them)
        allowed = call_every_method(channel, ((INTERNAL_TOKEN_HEADER, TOKEN),))
        assert "UNAUTHENTICATED" not in allowed.values() and "OK" in allowed.values()
        # health stays open: it tells only SERVING, and kubelet probes carry no token
        reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_the_client_sends_the_token_and_maps_a_refusal(token_only: Served) -> None:
    good = RemoteIndex.connect(token_only.address, remote(None))
    assert good.stats()["chunks"] == 0 and good.check_ready()
    bad = RemoteIndex.connect(token_only.address, remote(None, token="other"))
    with pytest.raises(RampartError) as err:
        bad.stats()
    assert err.value.code is ErrorCode.UNAUTHENTICATED and INTERNAL_TOKEN_HEADER in err.value.message
    good.close()
    bad.close()


def test_reflection_is_off_unless_enabled(token_only: Served) -> None:
    channel = open_channel(token_only.address, auth=ServiceAuth(token=TOKEN))
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        list(
            stub.ServerReflectionInfo(
                iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=5
            )
        )
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    channel.close()


def test_mtls_serves_only_clients_with_a_certificate_of_the_ca(
    mtls: Served, certs: DevCerts, tmp_path: Path
) -> None:
    client = RemoteIndex.connect(mtls.address, remote(certs))
    assert client.check_ready() and client.stats()["chunks"] == 0
    client.close()
    strangers = {
        "plaintext": grpc.insecure_channel(mtls.address),
        "TLS without a client certificate": grpc.secure_channel(
            mtls.address, grpc.ssl_channel_credentials(root_certificates=certs.ca.read_bytes())
        ),
    }
    other = make_dev_certs(tmp_path / "other-ca")  # a certificate, but of another CA
    strangers["another CA's certificate"] = open_channel(
        mtls.address,
        auth=ServiceAuth.from_settings(
            RemoteSettings(
                internal_token=SecretStr(TOKEN),
                tls=ServiceTlsSettings(
                    enabled=True,
                    ca_file=certs.ca,
                    cert_file=other.cert("client"),
                    key_file=other.key("client"),
                ),
            )
        ),
    )
    for what, channel in strangers.items():
        got = call_every_method(channel, ((INTERNAL_TOKEN_HEADER, TOKEN),))
        # the handshake fails before any RPC: gRPC reports the connection UNAVAILABLE
        assert set(got.values()) == {"UNAVAILABLE"}, (what, got)
        channel.close()
    # a certificate of the CA but no token: refused by the token check
    channel = open_channel(mtls.address, auth=ServiceAuth.from_settings(remote(certs, token=None)))
    assert set(call_every_method(channel).values()) == {"UNAUTHENTICATED"}
    channel.close()


# What each component may call on the retrieval service with the default lists (docs/security.md),
# written out here rather than read from services/retrieval/caller_roles.py: the test is the spec.
SEARCH_SIDE = {
    "rampart.retrieval.v1.RetrievalService.Search",
    "rampart.retrieval.v1.IndexService.Bm25",
    "rampart.retrieval.v1.IndexService.Dense",
    "rampart.retrieval.v1.IndexService.Cosine",
    "rampart.retrieval.v1.IndexService.StoredVectors",
    "rampart.retrieval.v1.IndexService.CopyCosines",
    "rampart.retrieval.v1.IndexService.Chunks",
    "rampart.links.v1.LinkService.Named",
}
LIFECYCLE_SIDE = {
    f"rampart.retrieval.v1.IndexService.{m}" for m in ("Write", "Delete", "Mark", "Status", "Current")
}


@pytest.fixture(scope="module")
def mtls_default_callers(
    tmp_path_factory: pytest.TempPathFactory, embedder: object, certs: DevCerts
) -> Iterator[Served]:
    auth = ServiceAuth.from_settings(remote(certs, "retrieval"))
    served = Served(
        tmp_path_factory.mktemp("roles"), embedder, auth, allowed_callers=["orchestrator", "ingest"]
    )
    yield served
    served.close()


@pytest.mark.parametrize(
    ("caller", "denied"),
    [
        ("orchestrator", LIFECYCLE_SIDE),  # the search path: cannot rewrite or delete documents
        ("ingest", SEARCH_SIDE),  # the document lifecycle: cannot read chunks, vectors or hits
    ],
)
def test_each_caller_of_retrieval_gets_only_its_side(
    mtls_default_callers: Served, certs: DevCerts, caller: str, denied: set[str]
) -> None:
    channel = open_channel(
        mtls_default_callers.address, auth=ServiceAuth.from_settings(remote(certs, caller))
    )
    got = call_every_method(channel)
    channel.close()
    assert {m for m, code in got.items() if code == "PERMISSION_DENIED"} == denied, got
    # the rest reached its handler (empty requests: answered, or refused as invalid)
    assert {code for m, code in got.items() if m not in denied} <= {"OK", "INVALID_ARGUMENT"}, got


def test_a_refused_method_names_the_setting_that_would_admit_the_caller(
    mtls_default_callers: Served, certs: DevCerts
) -> None:
    index = RemoteIndex.connect(mtls_default_callers.address, remote(certs, "orchestrator"))
    assert index.stats()["chunks"] == 0  # shared: both callers may describe the index
    with pytest.raises(RampartError) as denied:
        index.delete("acme", "d1")
    index.close()
    err = denied.value
    assert err.code is ErrorCode.PERMISSION_DENIED
    assert err.details["setting"] == "RAMPART_RETRIEVAL_SERVICE__WRITE_CALLERS"
    assert err.details["caller"] == "orchestrator" and err.details["allowed"] == ["ingest"]
    assert "Delete on the retrieval service" in err.message


def test_the_client_checks_the_servers_certificate(mtls: Served, tmp_path: Path) -> None:
    other = make_dev_certs(tmp_path / "other-ca")
    impostor_check = RemoteIndex.connect(mtls.address, remote(other))  # trusts another CA only
    with pytest.raises(RampartError) as err:
        impostor_check.stats()
    assert err.value.code is ErrorCode.UNAVAILABLE
    impostor_check.close()


def test_the_health_port_is_plaintext_and_serves_health_only(mtls: Served) -> None:
    assert mtls.app.server.health_port == mtls.settings.health_port
    with grpc.insecure_channel(f"127.0.0.1:{mtls.settings.health_port}") as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="rampart.retrieval.v1.IndexService"), timeout=5
        )
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        assert set(call_every_method(channel, ((INTERNAL_TOKEN_HEADER, TOKEN),)).values()) == {
            "UNIMPLEMENTED"
        }


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.1.2.3", "retrieval"])
def test_an_exposed_server_without_authentication_refuses_to_start(host: str) -> None:
    server = GrpcServer(GrpcServerSettings(host=host, port=free_port()), name="retrieval")
    loop = BackgroundLoop()
    try:
        with pytest.raises(RampartError) as err:
            loop.run(server.start())
        assert err.value.code is ErrorCode.FAILED_PRECONDITION
        assert "RAMPART_REMOTE__INTERNAL_TOKEN" in err.value.message and repr(host) in err.value.message
    finally:
        loop.close()


def test_missing_certificate_files_are_named_with_the_fix(tmp_path: Path) -> None:
    settings = RemoteSettings(
        tls=ServiceTlsSettings(
            enabled=True,
            ca_file=tmp_path / "ca.pem",
            cert_file=tmp_path / "c.pem",
            key_file=tmp_path / "k.pem",
        )
    )
    with pytest.raises(RampartError) as err:
        ServiceAuth.from_settings(settings)
    assert (
        "RAMPART_REMOTE__TLS__CA_FILE" in err.value.message and str(tmp_path / "ca.pem") in err.value.message
    )
    with pytest.raises(ValueError, match="RAMPART_REMOTE__TLS__CERT_FILE"):
        ServiceTlsSettings(enabled=True, ca_file=tmp_path / "ca.pem")


def test_ingest_and_retrieval_processes_talk_over_mtls_and_refuse_strangers(
    tmp_path: Path, models_dir: Path, certs: DevCerts
) -> None:
    """The two services as the stack runs them: child processes, each with its own certificate; the
    ingest service writes to the retrieval service over mTLS with the token."""
    env = {
        "RAMPART_REMOTE__INTERNAL_TOKEN": TOKEN,
        "RAMPART_REMOTE__TLS__ENABLED": "true",
        "RAMPART_REMOTE__TLS__CA_FILE": str(certs.ca),
        "RAMPART_REMOTE__TLS__CERT_FILE": str(certs.cert("retrieval")),
        "RAMPART_REMOTE__TLS__KEY_FILE": str(certs.key("retrieval")),
    }
    stack = IngestStack(tmp_path, models_dir, env)
    stack.retrieval.probe_auth = ServiceAuth.from_settings(remote(certs))
    stack.ingest.env.update(
        RAMPART_REMOTE__TLS__CERT_FILE=str(certs.cert("ingest")),
        RAMPART_REMOTE__TLS__KEY_FILE=str(certs.key("ingest")),
    )
    stack.ingest.probe_auth = stack.retrieval.probe_auth
    with stack:
        # each caller with the certificate of the component it stands for: the services' default
        # allowed_callers admit the gateway to ingest and the orchestrator to retrieval
        client = RemoteIngest.from_settings(
            remote(certs, "gateway").model_copy(update={"ingest_address": stack.ingest.address}),
            max_message_bytes=32 * 1024 * 1024,
        )
        doc = Document(
            id="d1", tenant="acme", acl=Acl(groups=["eng"]), title="Leave", text="Leave is 16 weeks."
        )
        assert [r.outcome for r in client.ingest([doc])] == ["indexed"]
        index = RemoteIndex.connect(stack.retrieval.address, remote(certs, "orchestrator"))
        assert {
            c.doc_id for c in index.chunks([h for h, _ in index.bm25("leave", ALICE, 5)], ALICE).values()
        } == {"d1"}
        index.close()
        client.close()
        # a certificate of the CA with the token, but of a component without that edge
        stranger = RemoteIndex.connect(stack.retrieval.address, remote(certs, "gateway"))
        with pytest.raises(RampartError) as denied:
            stranger.stats()
        assert (
            denied.value.code is ErrorCode.PERMISSION_DENIED and denied.value.details["caller"] == "gateway"
        )
        stranger.close()
        tool = RemoteIngest.from_settings(
            remote(certs, "client").model_copy(update={"ingest_address": stack.ingest.address}),
            max_message_bytes=32 * 1024 * 1024,
        )
        with pytest.raises(RampartError) as denied:
            tool.ingest([doc])
        assert denied.value.code is ErrorCode.PERMISSION_DENIED and denied.value.details["caller"] == "client"
        tool.close()
        ch = open_channel(stack.ingest.address, auth=ServiceAuth.from_settings(remote(certs, token=None)))
        for method in ingest_pb2.DESCRIPTOR.services_by_name["IngestService"].methods:
            call = ch.unary_unary(
                f"/rampart.ingest.v1.IngestService/{method.name}",
                request_serializer=empty_pb2.Empty.SerializeToString,
                response_deserializer=lambda b: b,
            )
            with pytest.raises(grpc.RpcError) as err:
                call(empty_pb2.Empty(), timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED, method.name
        ch.close()


def test_mtls_to_replicas_listed_by_ip(certs: DevCerts) -> None:
    """An ``ipv4:`` list has no name of its own: its one host is checked (the stack's replicas); on
    several hosts the shared name must be configured."""
    loop = BackgroundLoop()
    auth = ServiceAuth.from_settings(remote(certs, "retrieval"))
    servers = [
        GrpcServer(GrpcServerSettings(port=free_port()), name="retrieval", auth=auth) for _ in range(2)
    ]
    try:
        ports = [loop.run(s.start()) for s in servers]
        for s in servers:
            loop.run(s.set_serving())
        listed = ",".join(f"127.0.0.1:{p}" for p in ports)
        channel = open_channel(listed, auth=ServiceAuth.from_settings(remote(certs)))
        assert check_ready(channel, timeout_s=5)
        channel.close()
        with pytest.raises(RampartError) as err:
            open_channel(
                f"127.0.0.1:{ports[0]},127.0.0.2:{ports[1]}", auth=ServiceAuth.from_settings(remote(certs))
            )
        assert "RAMPART_REMOTE__TLS__SERVER_NAME" in err.value.message
        named = remote(certs).model_copy(
            update={"tls": remote(certs).tls.model_copy(update={"server_name": "localhost"})}
        )
        channel = open_channel(listed, auth=ServiceAuth.from_settings(named))  # a SAN of every certificate
        assert check_ready(channel, timeout_s=5)
        channel.close()
    finally:
        for s in servers:
            loop.run(s.stop(0))
        loop.close()
