"""``rampart train pairs`` after the examples are collected: cross-validate the penalties, fit the
evidence-pair model, save it with its card (docs/chain.md "Evidence pairs").

The examples come from :func:`services.evaluation.pair_data.collect_examples` (the routed pipeline as
served); the model and its card from :mod:`services.models.pair_train`. This module only sequences
them, so the command users run is exactly the code the shipped artifact came from.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from services.common.settings import RampartSettings
from services.evaluation.beir import BeirDataset
from services.models.pair_train import (
    PairExample,
    PairTrainConfig,
    all_supporting,
    card,
    cross_validate,
    featurise,
    fit_pairs,
)
from services.orchestrator.chain.pair_order import CARD_FILE


def reranker_half(settings: RampartSettings) -> str | None:
    """The HotpotQA half the reranker was trained on, as its manifest says (None: not recorded)."""
    from services.rerank.onnx_reranker import load_manifest

    if settings.rerank.backend != "onnx":
        return None
    half = load_manifest(settings.reranker_model_dir()).get("hotpotqa_half")
    return None if half is None else str(half)


def with_pair(examples: list[PairExample]) -> int:
    """How many examples hold both supporting documents in their head (what the model learns from)."""
    return sum(r.target is not None for r in featurise(examples))


def fit_and_save(
    examples: list[PairExample],
    counts: dict[str, int],
    cfg: PairTrainConfig,
    *,
    settings: RampartSettings,
    dataset: BeirDataset,
    reranker_id: str,
    out_dir: Path,
    model_id: str,
    command: str,
) -> dict[str, Any]:
    """Cross-validate ``cfg.cv_lams``, fit at ``cfg.lam``, write ``out_dir`` (weights and model card);
    returns the summary recorded with the model."""
    rows = featurise(examples)
    by_lam = {f"{x:g}": cross_validate(rows, replace(cfg, lam=x)) for x in cfg.cv_lams}
    summary: dict[str, Any] = {
        "model_id": model_id,
        "created": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "dataset": dataset.name,
        "split": dataset.split,
        "counts": counts,
        "examples": len(rows),
        "with_pair": sum(r.target is not None for r in rows),
        "lam": cfg.lam,
        "pair_depth": settings.chain.pair_depth,
        "reranker": {"model_id": reranker_id, "hotpotqa_half": reranker_half(settings)},
        "cross_validation": {"folds": cfg.folds, "served": all_supporting(rows, None), "by_lam": by_lam},
    }
    model = fit_pairs(rows, cfg.lam)
    model.save(out_dir, summary)
    (out_dir / CARD_FILE).write_text(card(model, summary), encoding="utf-8")
    return summary
