"""Build every model Rampart serves into one folder (``rampart models build``).

Today that is the embedder at ``<models_dir>/minilm-l6-v2`` (the default of
``RampartSettings.embedding_model_dir()``); the reranker joins here later. Each builder is idempotent,
so re-running is cheap; ``force`` rebuilds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

EMBEDDER_DIR = "minilm-l6-v2"


def build_models(
    models_dir: Path, *, force: bool = False, progress: Callable[[str], None] | None = None
) -> dict[str, Path]:
    """Build (or verify) all models under ``models_dir``; returns ``{name: folder}``."""
    from services.models.embedder_export import export_embedder

    models_dir = Path(models_dir)
    built: dict[str, Path] = {}
    built["embedder"] = export_embedder(models_dir / EMBEDDER_DIR, force=force, progress=progress)
    return built
