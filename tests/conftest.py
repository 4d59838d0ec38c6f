"""Shared fixtures. Integration tests use the real ONNX model, built once per checkout by
``rampart models build`` (``make test`` does it first; the fixture builds it if missing).

Every test's marker comes from its folder (``tests/tiers.py``, loaded here); tests/README.md says how
the tests are laid out."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.net import free_port
from services.common.settings import RampartSettings
from services.rerank.reranker import Reranker
from services.retrieval.embedder import Embedder

pytest_plugins = ["tests.tiers", "tests.preflight"]

REPO = Path(__file__).resolve().parent.parent


def flat(text: str) -> str:
    """Console output with its line wrapping undone, for substring assertions."""
    return " ".join(text.split())


@pytest.fixture(scope="session")
def models_dir() -> Path:
    path = Path(os.environ.get("RAMPART_MODELS_DIR", REPO / ".rampart" / "models"))
    from services.models.build import build_models

    build_models(path)  # no-op when up to date
    return path


@pytest.fixture(scope="session")
def embedder(models_dir: Path) -> Embedder:
    from services.retrieval.onnx_embedder import OnnxEmbedder

    return OnnxEmbedder.from_dir(models_dir / "minilm-l6-v2", batch_size=32)


@pytest.fixture(scope="session")
def reranker(models_dir: Path) -> Reranker:
    """The shipped cross-encoder (int8) on onnxruntime, loaded once."""
    from services.rerank.onnx_reranker import OnnxReranker

    return OnnxReranker.from_dir(models_dir / "reranker", variant="int8")


@pytest.fixture()
def settings(tmp_path: Path, models_dir: Path) -> RampartSettings:
    return RampartSettings(data_dir=tmp_path / "data", models_dir=models_dir, log_level="WARNING")


@pytest.fixture()
def runtime(settings: RampartSettings, embedder: Embedder, reranker: Reranker) -> Iterator[object]:
    """A full embedded runtime on a fresh data dir, sharing the session's loaded models."""
    from services.orchestrator.runtime import Runtime

    rt = Runtime.open(settings, embedder=embedder, reranker=reranker)
    yield rt
    rt.close()


TRITON_VENV = Path(os.environ.get("RAMPART_RERANK__TRITON__VENV", REPO / ".venv-triton"))


def start_triton(
    models_dir: Path, work: Path, tls: object = None, caller_key: str | None = None, **repo_options: object
) -> object:
    """A real tritonserver on loopback serving the shipped reranker (``make triton`` builds its venv);
    ``tls``: a ``TritonServerTls`` for its gRPC port; ``caller_key``: every API but health needs it."""
    from services.rerank.triton_repository import materialize
    from services.rerank.triton_server import TritonServer

    if not (TRITON_VENV / "bin" / "python").exists():
        pytest.fail(f"tritonserver venv {TRITON_VENV} is missing; run `make triton` (make test does)")
    repo = materialize(models_dir / "reranker", work / "repo", **repo_options)  # type: ignore[arg-type]
    server = TritonServer(
        venv=TRITON_VENV,
        repository=repo,
        work_dir=work / "server",
        grpc_port=free_port(),
        http_port=free_port(),
        metrics_port=free_port(),
        tls=tls,  # type: ignore[arg-type]
        caller_key=caller_key,
    )
    return server.start()


@pytest.fixture(scope="session")
def triton_server(models_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The session's tritonserver, started as the stack starts it: with a caller key (its clients pass
    ``key=triton_server.caller_key``), so every Triton test runs the keyed path production runs."""
    import secrets

    server = start_triton(models_dir, tmp_path_factory.mktemp("triton"), caller_key=secrets.token_urlsafe(24))
    yield server
    server.stop()  # type: ignore[attr-defined]
