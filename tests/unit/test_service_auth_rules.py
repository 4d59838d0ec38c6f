"""The rules of service authentication that need no server: which addresses count as exposed, what
a credential's repr shows, which name a replica list's certificates are checked against."""

from __future__ import annotations

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.service_auth import ServiceAuth, TlsMaterial, check_exposure, is_loopback

TLS = TlsMaterial(ca=b"ca", cert=b"cert", key=b"-----BEGIN PRIVATE KEY----- secret")


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"])
def test_loopback_hosts(host: str) -> None:
    assert is_loopback(host)
    check_exposure(ServiceAuth(), host, what="a server")  # no credentials needed there


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "retrieval", ""])
def test_exposed_hosts_need_a_credential(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(RampartError) as err:
        check_exposure(ServiceAuth(), host, what="a server")
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    check_exposure(ServiceAuth(token="t"), host, what="a server")
    check_exposure(ServiceAuth(tls=TLS), host, what="a server")


def test_repr_shows_no_secret() -> None:
    shown = repr(ServiceAuth(token="the-token-value", tls=TLS))
    assert "the-token-value" not in shown and "secret" not in shown and "token=set" in shown


def test_the_name_a_replica_list_is_checked_against() -> None:
    assert ServiceAuth(tls=TLS).channel_options(["127.0.0.1", "127.0.0.1"]) == [
        ("grpc.ssl_target_name_override", "127.0.0.1")
    ]
    assert ServiceAuth(tls=TLS).channel_options(None) == []  # one server or dns:///: its own name
    assert ServiceAuth(token="t").channel_options(["10.0.0.1", "10.0.0.2"]) == []  # no TLS, no name
    named = TlsMaterial(ca=b"", cert=b"", key=b"", server_name="retrieval")
    assert ServiceAuth(tls=named).channel_options(["10.0.0.1", "10.0.0.2"]) == [
        ("grpc.ssl_target_name_override", "retrieval")
    ]
    with pytest.raises(RampartError, match="RAMPART_REMOTE__TLS__SERVER_NAME"):
        ServiceAuth(tls=TLS).channel_options(["10.0.0.1", "10.0.0.2"])
