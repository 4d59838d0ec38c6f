"""Triton's caller key: the flags tritonserver gets and the keys it can parse."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.errors import ErrorCode, RampartError
from services.rerank.triton_key import (
    GRPC_KEY_HEADER,
    KEY_HEADER,
    RESTRICTED_APIS,
    client_headers,
    is_refusal,
    restricted_flags,
    server_flags,
)


def test_every_api_but_health_is_restricted_on_both_protocols() -> None:
    grpc_flag, http_flag = server_flags("k" * 24)
    assert grpc_flag == f"--grpc-restricted-protocol={','.join(RESTRICTED_APIS)}:{KEY_HEADER}={'k' * 24}"
    assert http_flag.startswith("--http-restricted-api=") and http_flag.endswith(f":{KEY_HEADER}={'k' * 24}")
    assert "health" not in RESTRICTED_APIS and {"inference", "model-config", "metadata"} <= set(
        RESTRICTED_APIS
    )
    assert restricted_flags("$(VAR)")[0].endswith("=$(VAR)")  # the chart's, expanded by the kubelet


@pytest.mark.parametrize(
    "bad", ["short", "has:colon-and-more-chars", "has=equals-0123456789", "a,b" * 8, "é" * 20]
)
def test_keys_triton_would_misparse_are_refused_without_being_echoed(bad: str) -> None:
    with pytest.raises(RampartError) as err:
        server_flags(bad)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT and "RAMPART_RERANK__TRITON__KEY" in err.value.message
    assert bad not in err.value.message


def test_clients_send_the_grpc_form_of_the_header() -> None:
    assert client_headers(None) is None and client_headers("") is None
    assert client_headers("k" * 24) == {GRPC_KEY_HEADER: "k" * 24}
    assert GRPC_KEY_HEADER == "triton-grpc-protocol-" + KEY_HEADER  # Triton's prefix for gRPC metadata
    assert is_refusal(
        "This protocol is restricted, expecting header 'triton-grpc-protocol-x-rampart-triton-key'"
    )
    assert not is_refusal("failed to connect to all addresses")


def test_triton_serve_refuses_an_exposed_address_without_a_key_and_a_malformed_key(tmp_path: object) -> None:
    from typer.testing import CliRunner

    from services.cli.main import app
    from tests.conftest import flat

    env = {"RAMPART_DATA_DIR": str(tmp_path), "COLUMNS": "200"}
    exposed = CliRunner().invoke(app, ["triton", "serve", "--address", "0.0.0.0"], env=env)
    assert exposed.exit_code == 2 and "set RAMPART_RERANK__TRITON__KEY" in flat(exposed.output)
    secret = "bad:key-0123456789abcdef"
    malformed = CliRunner().invoke(
        app, ["triton", "serve"], env={**env, "RAMPART_RERANK__TRITON__KEY": secret}
    )
    assert malformed.exit_code == 2 and "16-256 characters" in flat(malformed.output)
    assert secret not in malformed.output


def test_the_launchers_command_binds_every_listener_and_restricts_with_the_key(tmp_path: Path) -> None:
    """tritonserver's own flags: HTTP, gRPC and metrics on the launcher's address (metrics would follow
    --http-address, or 0.0.0.0 without it), and the key's restrictions only when a key is given."""
    from services.rerank.triton_server import TritonInstall, TritonServer

    files = {name: tmp_path / name for name in ("python", "tritonserver", "lib.so", "utils.py", "stub")}
    for f in files.values():
        f.touch()
    install = TritonInstall(
        files["python"],
        files["tritonserver"],
        files["lib.so"],
        files["utils.py"],
        files["stub"],
        tmp_path,
        tmp_path,
    )

    def command(**extra: object) -> list[str]:
        server = TritonServer(
            venv=tmp_path,
            repository=tmp_path,
            work_dir=tmp_path / "w",
            grpc_port=1,
            http_port=2,
            metrics_port=3,
            **extra,  # type: ignore[arg-type]
        )
        return server.command(install)

    plain = command(address="10.0.0.5")
    for flag in ("--http-address", "--grpc-address", "--metrics-address"):
        assert f"{flag}=10.0.0.5" in plain
    assert not any("restricted" in a for a in plain)
    keyed = command(caller_key="k" * 24)
    assert "--metrics-address=127.0.0.1" in keyed and server_flags("k" * 24) == keyed[-2:]
    assert "k" * 24 not in repr(
        TritonServer(
            venv=tmp_path,
            repository=tmp_path,
            work_dir=tmp_path,
            grpc_port=1,
            http_port=2,
            metrics_port=3,
            caller_key="k" * 24,
        )
    )
