"""``rampart tune routing``: grid-search HyPA's fusion weights per complexity on dev qrels.

Low-complexity plan: every query of a training split (SciFact ``train`` by default). Medium and high:
the HotpotQA-500 ``train`` half, grouped by the complexity the router gives each query (the
``heldout`` half is never read). Each query is searched once with both retrievers' candidate lists
filled in; every grid point re-fuses those lists with the configured fusion method (the code the
search path runs), so the grid costs one retrieval per query. BM25 + dense weights sum to 1; the KG
weight stays 0 (no KG is indexed). Prints the ``RAMPART_ROUTING__PLANS`` value to set.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from services.cli.ui import (
    console,
    fail,
    load_settings,
    out,
    progress_bar,
    resolve_dataset,
    task_updater,
    write_json_report,
)
from services.common.errors import RampartError, invalid

if TYPE_CHECKING:
    from services.common.settings import RampartSettings
    from services.evaluation.beir import BeirDataset
    from services.retrieval.embedder import Embedder

CANDIDATE_CHUNKS = 100  # chunks per retriever before fusion (RoutePlan.candidates' default)


@dataclass(frozen=True)
class Candidates:
    """One query's filled-in candidate lists, keyed by position, ready to be re-fused."""

    doc_ids: list[str]
    lists: dict[str, list[tuple[int, float]]]
    ranks: dict[str, list[int]]


def weight_grid(step: float) -> list[float]:
    n = round(1 / step)
    if n < 1 or abs(n * step - 1) > 1e-6:
        raise invalid(f"--step {step}: use a step that divides 1 (0.05, 0.1, 0.25)")
    return [round(i / n, 4) for i in range(n + 1)]


def collect(
    dataset: BeirDataset,
    query_ids: Sequence[str],
    settings: RampartSettings,
    embedder: Embedder,
    cache_dir: Path,
    progress: Any,
) -> dict[str, Candidates]:
    from services.evaluation.runner import EVAL_PRINCIPAL, eval_runtime
    from services.orchestrator.runtime import Variant
    from services.retrieval.hybrid import HybridRetriever, SearchParams

    params = SearchParams.from_settings(
        settings.fusion,
        top_k=2 * CANDIDATE_CHUNKS,  # the whole filled-in union
        weights={"bm25": 0.5, "dense": 0.5},
        candidates=CANDIDATE_CHUNKS,
        fill_missing=True,
    )
    out_: dict[str, Candidates] = {}
    first_stage = Variant(rerank=False, factcheck=False)
    with eval_runtime(
        dataset, settings, cache_dir, embedder=embedder, variant=first_stage, progress=progress
    ) as (runtime, _):
        retriever = runtime.search.retriever
        if not isinstance(retriever, HybridRetriever):  # an evaluation index is always this process's
            raise TypeError(
                f"tune routing re-fuses the in-process hybrid retriever's lists, not {retriever!r}"
            )
        vectors = embedder.embed([dataset.queries[q] for q in query_ids])
        for i, qid in enumerate(query_ids):
            hits = retriever.search_with_vector(dataset.queries[qid], vectors[i], EVAL_PRINCIPAL, params).hits
            lists: dict[str, list[tuple[int, float]]] = {"bm25": [], "dense": []}
            ranked: dict[str, list[tuple[int, int]]] = {"bm25": [], "dense": []}
            for key, h in enumerate(hits):
                for name in lists:
                    score, rank = h.scores.get(name), h.ranks.get(name)
                    if score is not None:
                        lists[name].append((key, score))
                    if rank is not None:
                        ranked[name].append((rank, key))
            out_[qid] = Candidates(
                [h.chunk.doc_id for h in hits],
                lists,
                {n: [k for _, k in sorted(r)] for n, r in ranked.items()},
            )
            if progress and (i % 25 == 0 or i == len(query_ids) - 1):
                progress(f"search {dataset.name}", i + 1, len(query_ids))
    return out_


def score_grid(
    cands: dict[str, Candidates],
    qrels: dict[str, dict[str, int]],
    grid: Sequence[float],
    settings: RampartSettings,
    metric: str,
) -> dict[float, float]:
    from services.evaluation.metrics import evaluate_run
    from services.evaluation.runner import maxp
    from services.retrieval.fusion import fuse

    judged = {q: qrels[q] for q in cands}
    scores = {}
    for w in grid:
        run = {}
        for qid, c in cands.items():
            fused = fuse(
                c.lists,
                {"bm25": w, "dense": round(1 - w, 4)},
                method=settings.fusion.method,
                rrf_k=settings.fusion.rrf_k,
                rank_lists=c.ranks,
            )
            run[qid] = maxp([(c.doc_ids[f.key], f.score) for f in fused])
        scores[w] = round(evaluate_run(judged, run, [metric])[metric], 4) if judged else 0.0
    return scores


def tune_routing(
    low_set: Annotated[Path, typer.Option(help="BEIR set for the low plan (a folder or a name)")] = Path(
        "scifact"
    ),
    low_split: Annotated[
        str, typer.Option(help="Its qrels split: a training/dev split, never test")
    ] = "train",
    multi_hop_set: Annotated[
        Path, typer.Option(help="BEIR set for medium/high; only its `train` query half is read")
    ] = Path("hotpotqa_dev500"),
    step: Annotated[
        float, typer.Option(min=0.01, max=0.5, help="BM25 weight grid step (dense = 1 - bm25)")
    ] = 0.1,
    metric: Annotated[str, typer.Option(help="Metric to maximise (document level, first stage)")] = "ndcg@10",
    max_queries: Annotated[
        int | None, typer.Option(min=1, help="At most this many queries per set (smoke runs)")
    ] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Index cache (default <data_dir setting>/eval-cache)")
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the grid and the choice here")
    ] = None,
) -> None:
    """Grid-search bm25/dense weights per complexity on dev qrels; print RAMPART_ROUTING__PLANS."""
    from services.evaluation.beir import load_beir
    from services.evaluation.metrics import validate_metrics
    from services.evaluation.splits import select_queries
    from services.orchestrator.routing.router import QueryRouter
    from services.retrieval.embedder import build_embedder

    settings = load_settings()
    cache = cache_dir or settings.data_dir / "eval-cache"
    try:
        if low_split == "test":
            raise invalid("--low-split test: tune on a training/dev split (SciFact train), never on test")
        validate_metrics([metric])
        grid = weight_grid(step)
        embedder = build_embedder(settings)
        router = QueryRouter.from_dir(
            settings.router_model_dir(), embedder, min_confidence=settings.routing.min_confidence
        )
        low_ds = load_beir(resolve_dataset(low_set, settings), split=low_split)
        multi_ds = load_beir(resolve_dataset(multi_hop_set, settings), split="test")
        low_ids = list(low_ds.queries)[:max_queries]
        multi_ids = select_queries(multi_ds.queries, "train")[:max_queries]
        routes = router.classify_many([multi_ds.queries[q] for q in multi_ids], [[] for _ in multi_ids])
        groups: dict[str, list[str]] = {"medium": [], "high": [], "low": []}
        for qid, route in zip(multi_ids, routes, strict=True):
            groups[route.complexity.value].append(qid)
        console.print(
            f"• {len(low_ids)} {low_ds.name} {low_split} queries for low; {len(multi_ids)} {multi_ds.name} "
            f"train-half queries routed medium {len(groups['medium'])}, high {len(groups['high'])}, "
            f"low {len(groups['low'])} (not used)"
        )
        with progress_bar() as bar:
            progress = task_updater(bar)
            low_c = collect(low_ds, low_ids, settings, embedder, cache, progress)
            multi_c = collect(multi_ds, multi_ids, settings, embedder, cache, progress)
        results: dict[str, dict[float, float]] = {
            "low": score_grid(low_c, low_ds.qrels, grid, settings, metric),
            "medium": score_grid(
                {q: multi_c[q] for q in groups["medium"]}, multi_ds.qrels, grid, settings, metric
            ),
            "high": score_grid(
                {q: multi_c[q] for q in groups["high"]}, multi_ds.qrels, grid, settings, metric
            ),
        }
    except RampartError as exc:
        raise fail(exc) from exc
    counts = {"low": len(low_ids), "medium": len(groups["medium"]), "high": len(groups["high"])}
    plans, chosen = _choose(results, settings, counts)
    _print(results, chosen, metric, counts)
    value = json.dumps(plans, separators=(",", ":"))
    console.print("settings to use (the whole table: one level alone cannot be set by env):")
    out.print(f"RAMPART_ROUTING__PLANS='{value}'", soft_wrap=True, markup=False)
    if json_out:
        write_json_report(
            json_out,
            {
                "command": "rampart " + " ".join(sys.argv[1:]),
                "metric": metric,
                "queries": counts,
                "grid": {lvl: {str(w): s for w, s in r.items()} for lvl, r in results.items()},
                "chosen": chosen,
                "plans": plans,
            },
        )


def _choose(
    results: dict[str, dict[float, float]], settings: RampartSettings, counts: dict[str, int]
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, float]]]:
    """Best weight per level (ties: the one nearest the current default); a level without queries
    keeps its current weights, renormalised without the KG."""
    plans: dict[str, dict[str, Any]] = {}
    chosen: dict[str, dict[str, float]] = {}
    for level, scores in results.items():
        plan = settings.routing.plans[level]
        current = plan.bm25_weight / max(plan.bm25_weight + plan.dense_weight, 1e-9)
        if counts[level] == 0:
            best = round(current, 4)
        else:
            best = max(scores, key=lambda w: (scores[w], -abs(w - current)))
        chosen[level] = {
            "bm25_weight": best,
            "dense_weight": round(1 - best, 4),
            "score": scores.get(best, float("nan")),
            "score_near_current": scores.get(round(current, 1), float("nan")),
        }
        plans[level] = {
            **plan.model_dump(),
            "bm25_weight": best,
            "dense_weight": round(1 - best, 4),
            "kg_weight": 0.0,
        }
    return plans, chosen


def _print(
    results: dict[str, dict[float, float]],
    chosen: dict[str, dict[str, float]],
    metric: str,
    counts: dict[str, int],
) -> None:
    table = Table(title=f"{metric} by BM25 weight (dense = 1 - BM25), first stage, per complexity")
    table.add_column("bm25")
    for level in results:
        table.add_column(f"{level} ({counts[level]} q)", justify="right")
    for w in next(iter(results.values())):
        cells = []
        for level, scores in results.items():
            mark = " *" if chosen[level]["bm25_weight"] == w else ""
            cells.append(f"{scores[w]:.4f}{mark}")
        table.add_row(f"{w:.2f}", *cells)
    out.print(table)
