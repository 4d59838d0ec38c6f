"""The ``Embedder`` protocol and its one factory.

Implementations: :class:`services.retrieval.onnx_embedder.OnnxEmbedder` (embedded default; ONNX
export of all-MiniLM-L6-v2). Remote implementations (Triton, a gRPC service) plug in here later.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from services.retrieval.config import EmbeddingSettings

Matrix = npt.NDArray[np.float32]


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised float32 vectors (so inner product == cosine)."""

    @property
    def dim(self) -> int: ...

    @property
    def model_id(self) -> str:
        """Stable identifier of the weights (changes when the model changes; used in cache keys)."""
        ...

    def embed(self, texts: Sequence[str]) -> Matrix:
        """Return an array of shape ``(len(texts), dim)``; batching is the implementation's job."""
        ...


def build_embedder(settings: EmbeddingSettings, models_dir: Path) -> Embedder:
    """Build the configured embedder (``models_dir``: where ``rampart models build`` put the models,
    unless ``settings.model_dir`` names the folder); fails loudly if the model has not been built."""
    from services.retrieval.onnx_embedder import OnnxEmbedder

    return OnnxEmbedder.from_dir(
        settings.resolve_model_dir(models_dir),
        batch_size=settings.batch_size,
        max_length=settings.max_length,
        threads=settings.threads,
        spin_wait=settings.spin_wait,
    )
