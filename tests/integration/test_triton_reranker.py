"""``TritonReranker`` (a real tritonserver, python backend, serving the shipped model over gRPC) under
the ``Reranker`` contract, its agreement with the in-process scorer, and what only a remote scorer
meets: version pinning, deadlines, an unreachable or dying server."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.dev_certs import make_dev_certs
from services.common.errors import ErrorCode, RampartError
from services.common.net import free_port
from services.rerank.config import TritonSettings, TritonTlsSettings
from services.rerank.reranker import Reranker
from services.rerank.stage import RerankStage
from services.rerank.triton_reranker import TritonReranker
from services.rerank.triton_server import TritonServerTls
from tests.conftest import start_triton
from tests.contracts.reranker import PASSAGES, RerankerContract
from tests.unit.test_rerank_stage import HITS, hit


class TestTritonReranker(RerankerContract):
    @pytest.fixture()
    def impl(self, triton_server: object) -> Iterator[Reranker]:
        remote = TritonReranker.connect(
            TritonSettings(
                url=triton_server.grpc_url, key=triton_server.caller_key, deadline_ms=60_000, batch_size=16
            )  # type: ignore[attr-defined]
        )
        yield remote
        remote.close()


def test_implementations_agree(reranker: Reranker, triton_server: object) -> None:
    remote = TritonReranker.connect(TritonSettings(url=triton_server.grpc_url, key=triton_server.caller_key))  # type: ignore[attr-defined]
    try:
        local = reranker.score("vpn setup", [*PASSAGES, "connect to the vpn with your sso account"])
        far = remote.score("vpn setup", [*PASSAGES, "connect to the vpn with your sso account"])
        assert far == pytest.approx(local, abs=1e-4)
        assert remote.model_id.startswith(reranker.model_id)  # same weights, version pinned on top
    finally:
        remote.close()


@pytest.mark.parametrize(("kind", "count"), [("KIND_CPU", 2), ("KIND_GPU", 1)])
def test_repository_instances_default_per_kind(
    models_dir: Path, tmp_path: Path, kind: str, count: int
) -> None:
    """Two CPU instances (one computes while the other's requests cross the python-backend hop); one
    per GPU."""
    from services.rerank.triton_repository import materialize

    repo = materialize(models_dir / "reranker", tmp_path / "repo", kind=kind)
    config = (repo / "rampart_reranker" / "config.pbtxt").read_text()
    assert f"instance_group [ {{ count: {count} kind: {kind} }} ]" in config


def test_triton_unreachable_is_unavailable_and_the_stage_degrades() -> None:
    cfg = TritonSettings(url=f"127.0.0.1:{free_port()}", retries=1)
    with pytest.raises(RampartError) as info:
        TritonReranker.connect(cfg)
    assert info.value.code is ErrorCode.UNAVAILABLE and "rampart triton serve" in info.value.message


def test_triton_version_pinning(triton_server: object) -> None:
    url, key = triton_server.grpc_url, triton_server.caller_key  # type: ignore[attr-defined]
    with pytest.raises(RampartError, match="version '2' is not ready"):
        TritonReranker.connect(TritonSettings(url=url, key=key, model_version="2"))


def test_triton_serves_only_callers_with_its_key_but_health_to_all(triton_server: object) -> None:
    """Started with a caller key (as the stack and the chart start it), Triton answers health to
    anyone (the kubelet's probes), and everything else, on gRPC and on plaintext HTTP, only with the
    key: a client without it, or with another, is refused at connect with the variable to set."""
    import httpx
    import tritonclient.grpc as grpcclient

    from services.rerank.triton_key import GRPC_KEY_HEADER, KEY_HEADER

    url, key = triton_server.grpc_url, triton_server.caller_key  # type: ignore[attr-defined]
    http = f"http://127.0.0.1:{triton_server.http_port}"  # type: ignore[attr-defined]
    for wrong in (None, "x" * 32):
        with pytest.raises(RampartError) as refused:
            TritonReranker.connect(TritonSettings(url=url, key=wrong, retries=0))
        assert refused.value.code is ErrorCode.PERMISSION_DENIED, refused.value
        assert "RAMPART_RERANK__TRITON__KEY" in refused.value.message and key not in refused.value.message
    raw = grpcclient.InferenceServerClient(url)
    try:
        assert raw.is_server_live() and raw.is_server_ready()  # health: open
        with pytest.raises(Exception, match="is restricted"):
            raw.get_model_metadata("rampart_reranker")
        with pytest.raises(Exception, match="is restricted"):  # Triton's own header name, the wrong key
            raw.get_model_metadata("rampart_reranker", headers={GRPC_KEY_HEADER: "x" * 32})
    finally:
        raw.close()
    assert httpx.get(f"{http}/v2/health/ready", timeout=10).status_code == 200
    body = {
        "inputs": [
            {"name": "QUERY", "shape": [1, 1], "datatype": "BYTES", "data": ["vpn"]},
            {"name": "PASSAGE", "shape": [1, 1], "datatype": "BYTES", "data": ["vpn setup"]},
        ]
    }
    infer = f"{http}/v2/models/rampart_reranker/versions/1/infer"
    for headers in ({}, {KEY_HEADER: "x" * 32}):
        r = httpx.post(infer, json=body, headers=headers, timeout=30)
        assert r.status_code == 403 and "restricted" in r.text, (headers.keys(), r.status_code)
    assert httpx.get(f"{http}/v2/models/rampart_reranker", timeout=10).status_code == 403  # metadata
    r = httpx.post(infer, json=body, headers={KEY_HEADER: key}, timeout=30)
    assert r.status_code == 200 and len(r.json()["outputs"][0]["data"]) == 1, r.text
    remote = TritonReranker.connect(TritonSettings(url=url, key=key))
    try:
        assert len(remote.score("vpn", ["vpn setup"])) == 1
    finally:
        remote.close()


def test_triton_deadline_is_enforced(triton_server: object) -> None:
    remote = TritonReranker.connect(
        TritonSettings(
            url=triton_server.grpc_url, key=triton_server.caller_key, deadline_ms=10, batch_size=64
        )  # type: ignore[attr-defined]
    )
    try:
        with pytest.raises(RampartError) as info:
            remote.score("slow", ["word " * 400] * 256)
        assert info.value.code is ErrorCode.DEADLINE_EXCEEDED
        result = RerankStage(remote).apply("slow", HITS * 64, depth=256, mode="pure", weight=0.5)
        assert result.degraded == ["rerank"]
    finally:
        remote.close()


def test_server_dying_mid_batch_degrades_then_recovers(models_dir: Path, tmp_path: Path) -> None:
    """Kill Triton while a large call is in flight: the stage returns fused order, flagged; never hangs."""
    server = start_triton(models_dir, tmp_path / "a")
    remote = TritonReranker.connect(
        TritonSettings(url=server.grpc_url, deadline_ms=30_000, retries=1, batch_size=8)  # type: ignore[attr-defined]
    )
    stage = RerankStage(remote)
    results: list[object] = []
    # ~4 s of work for this model (400 distinct pairs at the model's full length): still in flight at 0.5 s
    filler = " ".join(f"word{j}" for j in range(200))
    many = HITS + [hit(i, f"passage {i} {filler}", 0.1 - i * 1e-4) for i in range(4, 400)]
    worker = threading.Thread(
        target=lambda: results.append(stage.apply("q", many, depth=400, mode="pure", weight=0.5))
    )
    try:
        worker.start()
        time.sleep(0.5)
        server.stop()  # type: ignore[attr-defined]
        worker.join(timeout=60)
        assert not worker.is_alive(), "rerank hung after the server died"
        (result,) = results
        assert result.degraded == ["rerank"]  # type: ignore[attr-defined]
        assert [h.chunk.doc_id for h in result.hits][:4] == ["d0", "d1", "d2", "d3"]  # type: ignore[attr-defined]
    finally:
        remote.close()
        server.stop()  # type: ignore[attr-defined]


def test_triton_over_mutual_tls_serves_only_clients_of_its_ca(
    reranker: Reranker, models_dir: Path, tmp_path: Path
) -> None:
    """The launcher's --grpc-use-ssl-mutual flags on the real tritonserver, and the client's TLS from
    settings: the orchestrator's certificate of the same CA scores as the in-process model does; a
    plaintext client, a TLS client without a certificate and one of another CA are refused."""
    certs = make_dev_certs(tmp_path / "certs", ("triton", "orchestrator"))
    other = make_dev_certs(tmp_path / "other", ("orchestrator",))
    tls = TritonServerTls(certs.cert("triton"), certs.key("triton"), certs.ca)
    server = start_triton(models_dir, tmp_path / "triton", tls=tls)
    url = server.grpc_url  # type: ignore[attr-defined]

    def client_tls(ca: Path, cert: Path | None, key: Path | None) -> TritonSettings:
        tls = TritonTlsSettings(enabled=True, ca_file=ca, cert_file=cert, key_file=key)
        return TritonSettings(url=url, tls=tls, retries=0)

    try:
        remote = TritonReranker.connect(
            client_tls(certs.ca, certs.cert("orchestrator"), certs.key("orchestrator")), wait_s=10
        )
        local = reranker.score("vpn setup", PASSAGES)
        assert remote.score("vpn setup", PASSAGES) == pytest.approx(local, abs=1e-4)
        remote.close()
        strangers = {
            "plaintext": TritonSettings(url=url, retries=0),
            "no client certificate": client_tls(certs.ca, None, None),
            "another CA's certificate": client_tls(
                certs.ca, other.cert("orchestrator"), other.key("orchestrator")
            ),
        }
        for what, cfg in strangers.items():
            with pytest.raises(RampartError) as err:
                TritonReranker.connect(cfg)
            assert err.value.code is ErrorCode.UNAVAILABLE, what
        assert "rerank.triton.tls" in err.value.message  # a refused handshake names the settings
    finally:
        server.stop()  # type: ignore[attr-defined]
