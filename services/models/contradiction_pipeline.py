"""``rampart train contradiction`` end to end: NLI pairs → train → export ONNX → score dev → model card.

Each step is its own module (contradiction_data, contradiction_train, reranker_export's generic
:func:`~services.models.reranker_export.export_cross_encoder`, contradiction_card); this one only
sequences them, so the command users run is exactly the code the shipped artifact came from.
Installing reuses the reranker's :func:`~services.models.reranker_pipeline.install`.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from services.models.contradiction_card import render_card
from services.models.contradiction_data import (
    NliPair,
    build_nli_dataset,
    load_claim_pairs,
    synthetic_contradictions,
)
from services.models.contradiction_train import LABELS, NliTrainConfig, classification_report, train
from services.models.reranker_export import ExportTask, export_cross_encoder, read_manifest
from services.models.reranker_pipeline import CARD_FILE, packaged_encoder

Say = Callable[[str], None]
Progress = Callable[[str, int, int], None]
# int8 must give the fp32 label on nearly every pair (measured on the shipped model: see its card)
_INT8_MIN_AGREEMENT = 0.9
_CHECK_DEV_PAIRS = 96
# Fixed pairs for the export checks, beside a seeded sample of dev pairs: plain support, plain
# contradiction (number, negation, entity), unrelated evidence, and degenerate inputs.
_CHECK_PAIRS = (
    ("Aspirin reduced the risk of stroke by 30% in adults.", "Aspirin reduces stroke risk."),
    ("Aspirin increased the risk of stroke by 30% in adults.", "Aspirin reduces stroke risk."),
    ("The trial enrolled 400 patients over five years.", "The trial enrolled 40 patients."),
    ("Statins did not lower mortality in elderly patients.", "Statins lower mortality in the elderly."),
    ("BRCA1 loss increased tumour growth in mice.", "BRCA2 loss increases tumour growth."),
    ("The cafeteria menu changes every Monday.", "Vitamin D improves bone density."),
    ("", ""),
    ("word " * 600, "A very long premise is truncated, never rejected."),
)


def _agreement(q8: Any, expected: Any) -> tuple[dict[str, float], str | None]:
    import numpy as np

    def softmax(x: Any) -> Any:
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    agree = float((q8.argmax(axis=1) == expected.argmax(axis=1)).mean())
    figures = {
        "int8_max_abs_diff": float(np.abs(q8 - expected).max()),
        "int8_max_prob_diff": float(np.abs(softmax(q8) - softmax(expected)).max()),
        "int8_label_agreement": agree,
    }
    if agree >= _INT8_MIN_AGREEMENT:
        return figures, None
    return figures, (
        f"int8 contradiction classifier gives the fp32 label on only {agree:.1%} of the check pairs "
        f"(< {_INT8_MIN_AGREEMENT:.0%}); export fp32 only (--variants fp32)"
    )


def export_task(dev: Sequence[NliPair], seed: int) -> ExportTask:
    """The export checks: the fixed pairs plus a seeded sample of dev pairs (real premise lengths)."""
    sample = random.Random(seed).sample(list(dev), min(len(dev), _CHECK_DEV_PAIRS))
    return ExportTask(
        name="contradiction classifier",
        check_pairs=_CHECK_PAIRS + tuple((p.premise, p.hypothesis) for p in sample),
        int8_check=_agreement,
        labels=LABELS,
        outputs_hint=f"a contradiction classifier needs exactly {len(LABELS)}: {', '.join(LABELS)}",
    )


def onnx_dev_report(model_dir: Path, variant: str, dev: Sequence[NliPair], *, seed: int) -> dict[str, Any]:
    """Dev report of an exported variant as served (:class:`ContradictionModel`, batches of 32), its
    throughput here, and how often it calls held-out edits CONTRADICT: the synthetic edits (number,
    negation, entity) of *dev* SUPPORT pairs, per kind — the "answer is X, not Y" case dev lacks."""
    from services.factcheck.contradiction import CONTRADICT, ContradictionModel

    model = ContradictionModel.from_dir(model_dir, variant=variant)
    t0 = time.perf_counter()
    probs = model.predict([(p.premise, p.hypothesis) for p in dev])
    seconds = time.perf_counter() - t0
    gold = [LABELS.index(p.label.value) for p in dev]
    report = classification_report(gold, [int(i) for i in probs.argmax(axis=1)], LABELS)
    report["pairs_per_s"] = round(len(dev) / seconds, 1) if seconds > 0 else 0.0
    edits: dict[str, list[NliPair]] = {}
    for pair in synthetic_contradictions(dev, seed=seed):
        edits.setdefault(pair.source, []).append(pair)
    report["edit_recall"] = {
        kind: {
            "pairs": len(pairs),
            "contradict_recall": round(
                float(
                    (
                        model.predict([(p.premise, p.hypothesis) for p in pairs]).argmax(axis=1) == CONTRADICT
                    ).mean()
                ),
                4,
            ),
        }
        for kind, pairs in sorted(edits.items())
    }
    return report


def int8_drift(model_dir: Path, dev: Sequence[NliPair]) -> dict[str, float]:
    """How far int8 probabilities move on dev: against fp32 (both in batches of 32, as served), and
    against int8 itself scored one pair per call (dynamic int8 scales activations per batch)."""
    import numpy as np

    from services.factcheck.contradiction import BATCH_SIZE, ContradictionModel

    rows = [(p.premise, p.hypothesis) for p in dev]
    q8 = ContradictionModel.from_dir(model_dir, variant="int8")
    batched = np.vstack([q8.predict(rows[i : i + BATCH_SIZE]) for i in range(0, len(rows), BATCH_SIZE)])
    single = np.vstack([q8.predict([row]) for row in rows])
    fp32 = ContradictionModel.from_dir(model_dir, variant="fp32").predict(rows)
    vs_fp32 = np.abs(batched - fp32).max(axis=1)
    vs_single = np.abs(batched - single).max(axis=1)
    return {
        "pairs": float(len(rows)),
        "label_agreement_vs_fp32": round(float((batched.argmax(1) == fp32.argmax(1)).mean()), 4),
        "prob_diff_vs_fp32_mean": round(float(vs_fp32.mean()), 4),
        "prob_diff_vs_fp32_p95": round(float(np.percentile(vs_fp32, 95)), 4),
        "prob_diff_vs_fp32_max": round(float(vs_fp32.max()), 4),
        "prob_diff_batch32_vs_single_mean": round(float(vs_single.mean()), 4),
        "prob_diff_batch32_vs_single_max": round(float(vs_single.max()), 4),
    }


def train_contradiction(
    claims_dir: Path,
    cfg: NliTrainConfig,
    *,
    model_id: str,
    command: str,
    data_seed: int = 0,
    synthetic: bool = True,
    per_kind_limit: int | None = 150,
    limit: int | None = None,
    variants: tuple[str, ...] = ("fp32", "int8"),
    say: Say | None = None,
    progress: Progress | None = None,
) -> Path:
    """Run the whole pipeline; returns the exported model folder ``cfg.out_dir / 'onnx'``."""
    tell = say or (lambda _m: None)
    pairs, counts = build_nli_dataset(
        claims_dir, seed=data_seed, synthetic=synthetic, per_kind_limit=per_kind_limit
    )
    dev = (
        load_claim_pairs(claims_dir, "dev", seed=data_seed)
        if (claims_dir / "claims_dev.jsonl").is_file()
        else []
    )
    if limit is not None:  # a smoke run: the first pairs of the shuffled set
        pairs, dev = pairs[:limit], dev[:limit]
        counts = _counts(pairs)
    tell(f"contradiction: {len(pairs)} training pairs {counts}; {len(dev)} dev pairs")

    def step_progress(step: int, total: int, stats: dict[str, float]) -> None:
        if progress:  # one bar (a name per loss value would start a new one every step)
            progress("train contradiction", step, total)

    result = train(cfg, pairs, dev, packaged_encoder() / "tokenizer.json", progress=step_progress)
    tell(
        f"contradiction: {result.steps} steps in {result.seconds / 60:.1f} min ({result.stopped_by}); "
        f"best dev macro-F1 {result.dev.get('macro_f1')} at epoch {result.best_epoch}"
    )
    record = {k: v for k, v in asdict(result).items() if k != "losses"}
    onnx_dir = Path(cfg.out_dir) / "onnx"
    export_cross_encoder(
        Path(cfg.out_dir) / "hf",
        onnx_dir,
        export_task(dev, data_seed),
        model_id=model_id,
        max_length=cfg.max_length,
        variants=variants,
        extra_manifest={"training": {**record, "data": counts}},
        progress=tell,
    )
    served = {v: onnx_dev_report(onnx_dir, v, dev, seed=data_seed) for v in variants} if dev else {}
    for variant, report in served.items():
        tell(f"contradiction: {variant} ONNX dev macro-F1 {report['macro_f1']}")
    manifest = read_manifest(onnx_dir) or {}
    if served:  # the served variants' own dev figures go in the manifest (rewritten whole, atomically)
        manifest["dev"] = {v: {k: r[k] for k in ("pairs", "accuracy", "macro_f1")} for v, r in served.items()}
        if {"fp32", "int8"} <= set(served):
            manifest["dev_int8_drift"] = int8_drift(onnx_dir, dev)
        tmp = onnx_dir / "manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        tmp.replace(onnx_dir / "manifest.json")
    card = render_card(
        model_id=model_id,
        command=command,
        config={**asdict(cfg), "out_dir": str(cfg.out_dir)},
        data={
            "counts": counts,
            "data_seed": data_seed,
            "synthetic": synthetic,
            "per_kind_limit": per_kind_limit,
            "limit": limit,
        },
        result=record,
        served=served,
        manifest=manifest,
    )
    (onnx_dir / CARD_FILE).write_text(card, encoding="utf-8")
    (Path(cfg.out_dir) / "losses.json").write_text(json.dumps(result.losses), encoding="utf-8")
    return onnx_dir


def _counts(pairs: Sequence[NliPair]) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in pairs:
        for key in (f"label:{p.label.value}", f"source:{p.source}"):
            out[key] = out.get(key, 0) + 1
    return dict(sorted(out.items()))
