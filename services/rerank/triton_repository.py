"""Materialise a runnable Triton model repository from the project's template and an exported model.

The template (``model_repository/rampart_reranker/``: ``config.pbtxt`` + ``model.py``) is versioned
with the code; the model files are build outputs. This joins them::

    <out>/rampart_reranker/config.pbtxt       parameters filled in from the manifest and arguments
    <out>/rampart_reranker/1/model.py
    <out>/rampart_reranker/1/pair_scorer.py   the in-process scoring code, copied (one source of truth)
    <out>/rampart_reranker/1/{manifest.json, tokenizer.json, model*.onnx}

Model files are hard-linked when possible (same filesystem), else copied. The output is replaced
atomically, so a running server never sees a half-written repository.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from services.common.errors import ErrorCode, RampartError
from services.common.fs import swap_dir
from services.rerank.onnx_reranker import MANIFEST_FILE, TOKENIZER_FILE, load_manifest

TEMPLATE = Path(__file__).parent / "model_repository"
MODEL_NAME = "rampart_reranker"
VERSION = "1"
# CPU instances by default: while one instance's requests cross the python-backend hop (gRPC in, the
# stub process, results out), the other computes; with one instance, sixteen one-pair callers ran at
# 0.83-0.88 of in-process in two runs of three, with two at 0.99-1.08
# (docs/journal/2026-11-24-rerank-side-by-side.md, docs/journal/2026-11-25-triton-two-cpu-instances.md)
CPU_INSTANCES = 2


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


def materialize(
    model_dir: Path,
    out: Path,
    *,
    variant: str = "int8",
    max_length: int | None = None,
    instances: int | None = None,
    kind: str = "KIND_CPU",
    threads: int = 1,
    parallel: int = 0,
    batch_size: int = 1,
) -> Path:
    """Write the repository to ``out`` (replacing it) and return ``out``. ``instances`` defaults to
    :data:`CPU_INSTANCES` on CPU and one per GPU."""
    model_dir, out = Path(model_dir), Path(out)
    manifest = load_manifest(model_dir)
    info = manifest["variants"].get(variant)
    if not isinstance(info, dict):
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"reranker at {model_dir} has no {variant!r} variant (has: {', '.join(manifest['variants'])})",
        )
    if kind not in ("KIND_CPU", "KIND_GPU"):
        raise RampartError(ErrorCode.INVALID_ARGUMENT, f"instance kind {kind!r} must be KIND_CPU or KIND_GPU")
    sha = str(info.get("sha256", ""))[:12]
    length = max_length or int(manifest.get("max_length", 256))
    model_id = f"{manifest.get('model_id', model_dir.name)}@{sha}:{variant}"
    if length != int(manifest.get("max_length", 256)):
        model_id += f"+len{length}"
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".repo-", dir=out.parent))
    try:
        model = work / MODEL_NAME
        version = model / VERSION
        version.mkdir(parents=True)
        config = (TEMPLATE / MODEL_NAME / "config.pbtxt").read_text(encoding="utf-8")
        for key, value in {
            "MODEL_ID": model_id,
            "VARIANT": variant,
            "MAX_LENGTH": str(length),
            "THREADS": str(threads),
            "PARALLEL": str(parallel),
            "BATCH_SIZE": str(batch_size),
            "INSTANCE_COUNT": str(instances or (CPU_INSTANCES if kind == "KIND_CPU" else 1)),
            "INSTANCE_KIND": kind,
            "FIRST_STAGE_WEIGHT": str(manifest.get("first_stage_weight") or ""),
        }.items():
            config = config.replace(f"@{key}@", value)
        (model / "config.pbtxt").write_text(config, encoding="utf-8")
        shutil.copyfile(TEMPLATE / MODEL_NAME / "model.py", version / "model.py")
        shutil.copyfile(Path(__file__).parent / "pair_scorer.py", version / "pair_scorer.py")
        for name in (MANIFEST_FILE, TOKENIZER_FILE, str(info["file"])):
            _link_or_copy(model_dir / name, version / name)
        swap_dir(work, out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out
