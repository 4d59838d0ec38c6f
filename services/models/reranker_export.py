"""Export a Hugging Face cross-encoder to ONNX for :class:`services.rerank.onnx_reranker.OnnxReranker`.

One path for every cross-encoder: the one ``rampart train reranker`` produces (a local folder) and any
published one loaded by name where the network allows (``cross-encoder/ms-marco-MiniLM-L-6-v2``).

Output folder layout::

    model.onnx        fp32, dynamic batch/sequence, attention fused by onnxruntime's BERT optimizer
    model.int8.onnx   dynamic int8: MatMul/Attention per channel + embedding table (~23 MB)
    tokenizer.json    the fast tokenizer (pair template [CLS] q [SEP] p [SEP])
    manifest.json     identity, variants with hashes, agreement figures; written last (commit marker)

Both variants are checked against PyTorch on real text pairs before anything is installed: fp32 must
match to 1e-3 in logits, int8 must keep the ranking (Spearman) and its drift is recorded.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from services.common.errors import ErrorCode, RampartError
from services.models.build_deps import import_build_deps
from services.models.embedder_export import sha256_file
from services.models.pair_classifier import ARCHITECTURE as PAIR_ARCHITECTURE
from services.models.pair_classifier import is_pair_classifier
from services.models.split_encoder import ARCHITECTURE, is_split_encoder
from services.models.torch_reranker import load_torch_reranker

OPSET = 17
MANIFEST_FILE = "manifest.json"
TOKENIZER_FILE = "tokenizer.json"
VARIANT_FILES = {"fp32": "model.onnx", "int8": "model.int8.onnx"}
OUTPUT_NAME = "logits"
_FP32_TOLERANCE = 1e-3
# int8 must keep the order of a varied set of pairs close to fp32's (measured here: ~0.99).
_INT8_MIN_SPEARMAN = 0.9

_CHECK_PAIRS = [
    (
        "what causes tides",
        "Tides are caused by the gravitational pull of the moon and the sun on the oceans.",
    ),
    ("what causes tides", "The stock market closed higher on Tuesday after a volatile session."),
    ("what causes tides", "Ocean tides rise and fall twice a day along most coastlines."),
    ("who wrote hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600."),
    ("who wrote hamlet", "Denmark is a Nordic country in northern Europe."),
    ("who wrote hamlet", ""),
    (
        "vpn setup for remote staff",
        "To connect remotely, install the VPN client and sign in with your SSO account.",
    ),
    ("vpn setup for remote staff", "The cafeteria menu changes every Monday."),
    (
        "insulin resistance and obesity",
        "Obesity is associated with insulin resistance in skeletal muscle and liver.",
    ),
    ("insulin resistance and obesity", "The Eiffel Tower was completed in 1889 for the World's Fair. " * 12),
    ("capital of france", "Paris is the capital and most populous city of France."),
    ("capital of france", "Lyon is a city in France known for its cuisine."),
]


def read_manifest(model_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((Path(model_dir) / MANIFEST_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_complete(model_dir: Path) -> bool:
    """True if every variant the manifest lists is present with its recorded hash."""
    manifest = read_manifest(model_dir)
    if manifest is None or not (Path(model_dir) / TOKENIZER_FILE).is_file():
        return False
    variants = manifest.get("variants") or {}
    if not variants:
        return False
    for info in variants.values():
        f = Path(model_dir) / str(info.get("file", ""))
        if not f.is_file() or sha256_file(f) != info.get("sha256"):
            return False
    return True


Int8Check = Callable[[Any, Any], tuple[dict[str, float], str | None]]


@dataclass(frozen=True)
class ExportTask:
    """What an exported cross-encoder computes and how its int8 variant is judged: the reranker (one
    relevance logit, order must survive) or a pair classifier (one logit per label)."""

    name: str  # in messages and errors: "reranker", "contradiction classifier"
    check_pairs: tuple[tuple[str, str], ...]
    # (int8 logits, torch logits), both (pairs, outputs) -> figures for the manifest, and a reason to
    # refuse the int8 file (None = keep it)
    int8_check: Int8Check
    labels: tuple[str, ...] | None = None  # None: one relevance logit; else the outputs, in order
    outputs_hint: str = "a reranker needs exactly one relevance logit (a cross-encoder trained for ranking)"


def _ranking_kept(q8: Any, expected: Any) -> tuple[dict[str, float], str | None]:
    import numpy as np

    rho = spearman(q8[:, 0], expected[:, 0])
    figures = {"int8_max_abs_diff": float(np.abs(q8 - expected).max()), "int8_spearman": rho}
    if rho >= _INT8_MIN_SPEARMAN:
        return figures, None
    return figures, (
        f"int8 reranker ranks pairs unlike fp32 (Spearman {rho:.3f} < {_INT8_MIN_SPEARMAN}); "
        "export fp32 only (--variants fp32)"
    )


RERANKER_TASK = ExportTask(name="reranker", check_pairs=tuple(_CHECK_PAIRS), int8_check=_ranking_kept)


def export_reranker(
    source: str | Path,
    out_dir: Path,
    *,
    model_id: str | None = None,
    max_length: int = 192,
    variants: tuple[str, ...] = ("fp32", "int8"),
    extra_manifest: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Export ``source`` (local folder or hub name) into ``out_dir``; returns ``out_dir``."""
    return export_cross_encoder(
        source,
        out_dir,
        RERANKER_TASK,
        model_id=model_id,
        max_length=max_length,
        variants=variants,
        extra_manifest=extra_manifest,
        progress=progress,
    )


def export_cross_encoder(
    source: str | Path,
    out_dir: Path,
    task: ExportTask,
    *,
    model_id: str | None = None,
    max_length: int = 192,
    variants: tuple[str, ...] = ("fp32", "int8"),
    extra_manifest: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """Export the cross-encoder ``source`` (local folder or hub name) for ``task`` into ``out_dir``."""
    say = progress or (lambda _m: None)
    name = task.name
    unknown = set(variants) - VARIANT_FILES.keys()
    if unknown or not variants:
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT,
            f"unknown {name} variants {sorted(unknown) or '(none)'}; choose from {', '.join(VARIANT_FILES)}",
        )
    local = Path(source).is_dir()
    # a local folder must never reach for the hub; a hub name may (where the network allows)
    torch, transformers = import_build_deps(f"exporting a {name}", offline=local)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".export-", dir=out_dir))
    try:
        say(f"{name}: loading {source}")
        split = local and is_split_encoder(source)
        # Rampart's own architectures carry their tokenizer.json (the split one: its pair template)
        own = split or (local and is_pair_classifier(source))
        model, hf_tokenizer = _load_for(task, source, split=split, own=own, transformers=transformers)
        tok_path = work / TOKENIZER_FILE
        if hf_tokenizer is None:
            shutil.copyfile(Path(source) / TOKENIZER_FILE, tok_path)
        else:
            hf_tokenizer.backend_tokenizer.save(str(tok_path))
        _install_variants(model, torch, tok_path, work, out_dir, variants, max_length, say, task)
        fusion_file = Path(source) / "rampart_fusion.json" if local else None
        fusion = json.loads(fusion_file.read_text()) if fusion_file and fusion_file.is_file() else {}
        architecture = ARCHITECTURE if split else PAIR_ARCHITECTURE if own else model.config.model_type
        manifest = {
            "model_id": model_id or (Path(source).name if local else str(source)),
            # set for models trained residually (rerank mode "residual"): score = logit + w * prior
            **(
                {"first_stage_weight": float(fusion["first_stage_weight"])}
                if "first_stage_weight" in fusion
                else {}
            ),
            **({"labels": list(task.labels)} if task.labels else {}),
            "max_length": max_length,
            "output": OUTPUT_NAME,
            "architecture": architecture,
            **({"split_layers": int(model.split_layers)} if split else {}),
            "num_layers": int(getattr(model.config, "num_hidden_layers", 0)),
            **json.loads((work / "variants.json").read_text()),
            "source": {"name": str(source), "local": local},
            "tools": {n: _version(n) for n in ("torch", "transformers", "onnx", "onnxruntime", "tokenizers")},
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            **(extra_manifest or {}),
        }
        tmp = work / MANIFEST_FILE
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(out_dir / MANIFEST_FILE)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    say(f"{name}: built at {out_dir}")
    return out_dir


def _load_for(
    task: ExportTask, source: str | Path, *, split: bool, own: bool, transformers: Any
) -> tuple[Any, Any]:
    """The torch model at ``source`` and its Hugging Face tokenizer (``None`` for Rampart's own
    architectures, which carry a tokenizer.json); refuses a model whose outputs are not ``task``'s."""
    try:
        model = load_torch_reranker(source)
        hf_tokenizer = None if own else transformers.AutoTokenizer.from_pretrained(str(source))
    except (OSError, ValueError) as exc:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"cannot load cross-encoder {source!s} ({exc}); pass a local folder with config.json, "
            "weights and tokenizer files, or a hub name on a machine with network access",
            source=str(source),
        ) from exc
    labels = _output_labels(model, split)
    if len(labels) != len(task.labels or ("logit",)) or (task.labels and not _same_labels(labels, task)):
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"{source!s} has {len(labels)} output labels ({', '.join(labels)}); {task.outputs_hint}",
        )
    return model, hf_tokenizer


def _output_labels(model: Any, split: bool) -> list[str]:
    """The model's output names in logit order (``LABEL_i`` when a Hugging Face config names none)."""
    if split:
        return ["logit"]
    if getattr(model, "labels", None):
        return [str(x) for x in model.labels]
    n = int(model.config.num_labels)
    id2label = getattr(model.config, "id2label", None) or {}
    return [str(id2label.get(i, f"LABEL_{i}")) for i in range(n)]


def _same_labels(labels: list[str], task: ExportTask) -> bool:
    """Named outputs must be the task's, in its order; unnamed ones (``LABEL_i``) are taken on trust."""
    if all(x == f"LABEL_{i}" for i, x in enumerate(labels)):
        return True
    return [x.upper() for x in labels] == [x.upper() for x in task.labels or ()]


def _install_variants(
    model: Any,
    torch: Any,
    tok_path: Path,
    work: Path,
    out_dir: Path,
    variants: tuple[str, ...],
    max_length: int,
    say: Callable[[str], None],
    task: ExportTask,
) -> None:
    """Export ``model``, check each variant against torch on ``task``'s pairs, move the variants and the
    tokenizer into ``out_dir``, and record hashes and checks in ``work / 'variants.json'``."""
    from tokenizers import Tokenizer

    from services.rerank.pair_scorer import PairScorer, configure_tokenizer

    name = task.name
    pairs = list(task.check_pairs)
    tokenizer = configure_tokenizer(Tokenizer.from_file(str(tok_path)), max_length)
    uses_types = int(getattr(model.config, "type_vocab_size", 0) or 0) > 1
    input_names = ["input_ids", "attention_mask"] + (["token_type_ids"] if uses_types else [])
    raw = work / "raw.onnx"
    say(f"{name}: exporting to ONNX (opset {OPSET})")
    expected = _trace(model, torch, tokenizer, pairs, input_names, raw)

    def scores_of(path: Path) -> Any:
        """One pair per call: dynamic int8 scales activations per batch, so this is batch-invariant."""
        scorer = PairScorer.load(str(path), str(tok_path), max_length=max_length, batch_size=1)
        return scorer.logits_pairs(pairs)

    fp32, fused, diff = _fp32_graph(raw, work / "fused.onnx", model.config, expected, scores_of, name, say)
    record: dict[str, Any] = {"fused_operators": fused, "variants": {}, "checks": {"fp32_max_abs_diff": diff}}
    if "int8" in variants:
        say(f"{name}: int8 dynamic quantisation (per-channel MatMul/Attention, embeddings)")
        q8 = work / VARIANT_FILES["int8"]
        _quantise_int8(fp32, q8)
        figures, refused = task.int8_check(scores_of(q8), expected)
        record["checks"].update(figures)
        if refused:
            raise RampartError(ErrorCode.INTERNAL, refused)
        record["variants"]["int8"] = {"file": VARIANT_FILES["int8"], "sha256": sha256_file(q8)}
        q8.replace(out_dir / VARIANT_FILES["int8"])
    if "fp32" in variants:
        record["variants"]["fp32"] = {"file": VARIANT_FILES["fp32"], "sha256": sha256_file(fp32)}
        fp32.replace(out_dir / VARIANT_FILES["fp32"])
    record["inputs"] = input_names
    (work / "variants.json").write_text(json.dumps(record))
    tok_path_out = out_dir / TOKENIZER_FILE
    shutil.copyfile(tok_path, work / "tok.tmp")
    (work / "tok.tmp").replace(tok_path_out)


def _trace(
    model: Any,
    torch: Any,
    tokenizer: Any,
    pairs: list[tuple[str, str]],
    input_names: list[str],
    raw: Path,
) -> Any:
    """Trace ``model``'s logits into ``raw``; returns torch's logits on ``pairs`` (pairs, outputs), the
    reference every variant is checked against."""
    import numpy as np

    from services.rerank.pair_scorer import pad_batch

    module_base: Any = torch.nn.Module

    class _Logits(module_base):  # type: ignore[misc]
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, *args: Any) -> Any:
            return self.inner(**dict(zip(input_names, args, strict=True)), return_dict=True).logits

    wrapper = _Logits(model).eval()
    rows = []
    with torch.no_grad():
        for start in range(0, len(pairs), 32):  # the check set may be large (a classifier's dev sample)
            feeds = pad_batch([tokenizer.encode(a, b) for a, b in pairs[start : start + 32]])
            rows.append(wrapper(*[torch.from_numpy(feeds[n]) for n in input_names]).float().numpy())
        expected = np.concatenate(rows).reshape(len(pairs), -1)
        feeds = pad_batch([tokenizer.encode(a, b) for a, b in pairs[:2]])
        dummy = tuple(torch.from_numpy(feeds[n][:2, :16].copy()) for n in input_names)
    axes = {n: {0: "batch", 1: "sequence"} for n in input_names} | {OUTPUT_NAME: {0: "batch"}}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            wrapper,
            dummy,
            str(raw),
            input_names=input_names,
            output_names=[OUTPUT_NAME],
            dynamic_axes=axes,
            opset_version=OPSET,
            do_constant_folding=True,
            dynamo=False,
        )
    return expected


def _fp32_graph(
    raw: Path,
    fused_path: Path,
    config: Any,
    expected: Any,
    scores_of: Callable[[Path], Any],
    name: str,
    say: Callable[[str], None],
) -> tuple[Path, dict[str, int], float]:
    """The fp32 graph to ship, its fused operator counts and its max logit difference from torch: the
    BERT-fused graph when it matches torch, else the traced one; raises when neither does."""
    import numpy as np

    fp32 = raw
    fused: dict[str, int] = {}
    if config.model_type == "bert":
        say(f"{name}: fusing attention/GELU/layer-norm (onnxruntime BERT optimizer)")
        fp32, fused = _fuse(raw, fused_path, config)
    got = scores_of(fp32)
    diff = float(np.abs(got - expected).max())
    if fused and not diff < _FP32_TOLERANCE:
        # the optimizer matched a pattern it does not compute the same way (e.g. a custom attention
        # mask): keep the unfused graph, which is exact, rather than a fast wrong one
        say(f"{name}: fused graph disagrees with torch ({diff:.3g}); keeping the unfused graph")
        fp32, fused = raw, {}
        got = scores_of(fp32)
        diff = float(np.abs(got - expected).max())
    if not diff < _FP32_TOLERANCE:
        raise RampartError(
            ErrorCode.INTERNAL,
            f"exported {name} disagrees with torch (max abs diff {diff:.3g}); check torch/onnxruntime versions",
        )
    return fp32, fused, diff


def _fuse(raw: Path, fused_path: Path, config: Any) -> tuple[Path, dict[str, int]]:
    """Fuse attention/GELU/layer-norm of a BERT graph into ``fused_path``; returns it and the fused
    operator counts."""
    from onnxruntime.transformers.optimizer import optimize_model

    opt = optimize_model(
        str(raw),
        model_type="bert",
        num_heads=int(config.num_attention_heads),
        hidden_size=int(config.hidden_size),
        opt_level=0,
    )
    fused = {k: int(v) for k, v in opt.get_fused_operator_statistics().items() if v}
    opt.save_model_to_file(str(fused_path))
    return fused_path, fused


def _quantise_int8(fp32: Path, q8: Path) -> None:
    """Dynamic int8 quantisation of the fp32 graph into ``q8``."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(
        str(fp32),
        str(q8),
        weight_type=QuantType.QInt8,
        per_channel=True,
        # 7-bit weights: CPUs without VNNI (AVX2 only, e.g. the AMD EPYC this was measured on) sum
        # u8*s8 products in int16 and saturate with 8-bit weights — there a 2-step test model's int8
        # ranking fell to Spearman 0.78 against fp32; with reduce_range it passes the check
        reduce_range=True,
        # Attention and the embedding table too: MatMul alone leaves 58 MB of fp32 weights; all three
        # give ~23 MB (the shipped artifact must stay under 30 MB) at a max logit drift of ~0.01; an
        # unfused graph (the split architecture) holds its word embeddings in a Gather instead.
        op_types_to_quantize=["MatMul", "Attention", "EmbedLayerNormalization", "Gather"],
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )


def spearman(a: Any, b: Any) -> float:
    """Rank correlation of two score vectors (no ties expected between float logits)."""
    import numpy as np

    ra = np.argsort(np.argsort(a)).astype(np.float64)
    rb = np.argsort(np.argsort(b)).astype(np.float64)
    return float(np.corrcoef(ra, rb)[0, 1])


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
