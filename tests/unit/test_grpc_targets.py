"""gRPC targets of the remote stages: one server, or client-side round robin over replicas."""

from __future__ import annotations

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.grpc_client import channel_target


def test_one_address_is_one_server() -> None:
    assert channel_target("127.0.0.1:50051") == ("127.0.0.1:50051", False)
    assert channel_target("retrieval:50051") == ("retrieval:50051", False)


def test_a_list_of_ipv4_replicas_is_balanced() -> None:
    assert channel_target("127.0.0.1:50051, 127.0.0.1:50061") == (
        "ipv4:127.0.0.1:50051,127.0.0.1:50061",
        True,
    )
    assert channel_target("dns:///retrieval:50051") == ("dns:///retrieval:50051", True)


@pytest.mark.parametrize(
    ("address", "named"),
    [("127.0.0.1", "'127.0.0.1'"), ("a:1,b:2", "'a'"), ("127.0.0.1:1,:2", "':2'"), ("", "''")],
)
def test_bad_addresses_name_the_value_and_the_fix(address: str, named: str) -> None:
    with pytest.raises(RampartError) as caught:
        channel_target(address)
    assert caught.value.code is ErrorCode.INVALID_ARGUMENT
    assert named in caught.value.message and ("dns:///" in caught.value.message)
