"""Shared fixtures. Integration tests use the real ONNX model, built once per checkout by
``rampart models build`` (``make test`` does it first; the fixture builds it if missing)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common.settings import RampartSettings
from services.retrieval.embedder import Embedder

REPO = Path(__file__).resolve().parent.parent


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


@pytest.fixture()
def settings(tmp_path: Path, models_dir: Path) -> RampartSettings:
    return RampartSettings(data_dir=tmp_path / "data", models_dir=models_dir, log_level="WARNING")


@pytest.fixture()
def runtime(settings: RampartSettings, embedder: Embedder) -> Iterator[object]:
    """A full embedded runtime on a fresh data dir, sharing the session's loaded model."""
    from services.orchestrator.runtime import Runtime

    rt = Runtime.open(settings, embedder=embedder)
    yield rt
    rt.close()
