"""TLS to Triton's gRPC port from settings (``rerank.triton.tls``) and on the launcher's command line;
the real handshake is ``tests/integration/test_triton_reranker.py`` (a tritonserver on mutual TLS)."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from services.cli.triton import grpc_tls
from services.common.errors import ErrorCode, RampartError
from services.rerank.config import TritonTlsSettings
from services.rerank.triton_reranker import triton_credentials
from services.rerank.triton_server import TritonServerTls


def test_tls_needs_its_ca_and_a_whole_client_pair() -> None:
    with pytest.raises(ValueError, match="RAMPART_RERANK__TRITON__TLS__CA_FILE"):
        TritonTlsSettings(enabled=True)
    with pytest.raises(ValueError, match="RAMPART_RERANK__TRITON__TLS__KEY_FILE"):
        TritonTlsSettings(enabled=True, ca_file=Path("ca.pem"), cert_file=Path("c.pem"))
    assert triton_credentials(TritonTlsSettings()) == (None, [])  # off: plaintext, as before


def test_a_missing_or_non_pem_file_names_its_variable(tmp_path: Path) -> None:
    with pytest.raises(RampartError) as err:
        triton_credentials(TritonTlsSettings(enabled=True, ca_file=tmp_path / "nope.pem"))
    assert err.value.code is ErrorCode.FAILED_PRECONDITION
    assert "RAMPART_RERANK__TRITON__TLS__CA_FILE" in err.value.message and "nope.pem" in err.value.message
    (tmp_path / "ca.pem").write_text("not a certificate")
    with pytest.raises(RampartError, match="holds no PEM block"):
        triton_credentials(TritonTlsSettings(enabled=True, ca_file=tmp_path / "ca.pem"))


def test_server_name_overrides_the_checked_name(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    tls = TritonTlsSettings(enabled=True, ca_file=tmp_path / "ca.pem", server_name="rampart-triton")
    credentials, options = triton_credentials(tls)
    assert credentials is not None and options == [("grpc.ssl_target_name_override", "rampart-triton")]


def test_launcher_flags_are_mutual_with_a_ca_and_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    mutual = TritonServerTls(Path("t.pem"), Path("t-key.pem"), Path("ca.pem")).flags()
    assert mutual == [
        "--grpc-use-ssl=true",
        f"--grpc-server-cert={tmp_path / 't.pem'}",
        f"--grpc-server-key={tmp_path / 't-key.pem'}",
        f"--grpc-root-cert={tmp_path / 'ca.pem'}",
        "--grpc-use-ssl-mutual=true",
    ]
    assert "--grpc-use-ssl-mutual=true" not in TritonServerTls(Path("t.pem"), Path("k.pem")).flags()


def test_triton_serve_refuses_half_a_pair(tmp_path: Path) -> None:
    assert grpc_tls(None, None, None) is None
    with pytest.raises(typer.BadParameter, match="--grpc-key"):
        grpc_tls(tmp_path / "t.pem", None, None)
    with pytest.raises(typer.BadParameter, match="not a file"):
        grpc_tls(tmp_path / "t.pem", tmp_path / "k.pem", None)
