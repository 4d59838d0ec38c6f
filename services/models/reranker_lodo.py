"""Leave one domain out: how a reranker training recipe does on a kind of corpus it never saw (issue 38).

For each domain of :mod:`services.evaluation.rerank_domains`, the recipe is trained on the other
domains' sources (with ``domain_halves``, so no evaluation query is trained on) and scored on the domain
left out; the recipe's figure is its **worst** held-out gain (fused nDCG@10 over the first stage), not
its average, because a rule fitted to one benchmark shows up elsewhere as no gain or a loss. The
shipped recipe is the one with the best worst gain (docs/reranking.md, "Leave one domain out").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from services.common.settings import RampartSettings
from services.evaluation.general import Harness
from services.evaluation.rerank_domains import DOMAIN_NAMES, domain_row, select_domains
from services.models.reranker_pipeline import train_reranker
from services.models.reranker_train import TrainConfig
from services.rerank.reranker import Reranker, build_reranker
from services.retrieval.embedder import Embedder

# the training source that stands for each evaluated domain (reranker_data.SOURCES)
DOMAIN_SOURCES: dict[str, str] = {
    "scifact": "scifact",
    "hotpotqa": "hotpotqa",
    "nq-oracle": "nq",
    "2wikimultihopqa": "twowiki",
    "classic": "classic",
}


def fold_sources(held_out: str) -> list[str]:
    """The sources a fold trains on: every domain's but ``held_out``'s."""
    return [s for d, s in DOMAIN_SOURCES.items() if d != held_out]


def run_lodo(
    settings: RampartSettings,
    embedder: Embedder,
    cfg: TrainConfig,
    harness: Callable[[Reranker | None], Harness],
    *,
    domains: Sequence[str] = DOMAIN_NAMES,
    command: str,
    say: Callable[[str], None] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> dict[str, Any]:
    """Train one model per held-out domain under ``cfg.out_dir/<domain>`` (a finished fold's model is
    reused, so an interrupted run resumes) and score it on that domain; returns the folds' rows and
    the worst fused gain."""
    tell = say or (lambda _m: None)
    rows: list[dict[str, Any]] = []
    for name in domains:
        (domain,) = select_domains(name)
        out = Path(cfg.out_dir) / name
        onnx_dir = out / "onnx"
        if not (onnx_dir / "manifest.json").is_file():
            tell(f"fold {name}: training on {', '.join(fold_sources(name))}")
            onnx_dir = train_reranker(
                settings,
                embedder,
                dataclasses.replace(cfg, out_dir=out),
                sources=fold_sources(name),
                model_id=f"lodo-{name}",
                command=command,
                variants=("fp32", settings.rerank.variant),
                domain_halves=True,
                say=say,
                progress=progress,
            )
        # the fold's model through the stage's own factory, with every other rerank setting as served
        fold = settings.rerank.model_copy(update={"model_dir": onnx_dir, "backend": "onnx", "enabled": True})
        row = domain_row(domain, harness(build_reranker(fold, settings.models_dir)))
        tell(f"fold {name}: fused gain {row['gain_fused']:+.4f} (first stage {row['first_stage']:.4f})")
        rows.append({**row, "trained_on": fold_sources(name), "model_dir": str(onnx_dir)})
    worst = min(rows, key=lambda r: r["gain_fused"])
    return {
        "recipe": {k: str(v) if isinstance(v, Path) else v for k, v in dataclasses.asdict(cfg).items()},
        "rows": rows,
        "worst_gain_fused": {"domain": worst["domain"], "value": worst["gain_fused"]},
    }
