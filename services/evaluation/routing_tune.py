"""Grid-searching HyPA's fusion weights per complexity on dev qrels (``rampart tune routing``).

Low-complexity plan: every query of a training split (SciFact ``train`` by default). Medium and high:
the HotpotQA-500 ``train`` half, grouped by the complexity the router gives each query (the
``heldout`` half is never read). Each query is searched once with both retrievers' candidate lists
filled in; every grid point re-fuses those lists with the configured fusion method (the code the
search path runs), so the grid costs one retrieval per query. BM25 + dense weights sum to 1; the KG
weight stays 0 (no KG is indexed). Prints the ``RAMPART_ROUTING__PLANS`` value to set, and
:func:`save_plans` writes the table as a route-plans artifact (:mod:`services.models.routing_plans`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from services.common.errors import invalid
from services.common.settings import RampartSettings
from services.evaluation.beir import BeirDataset, load_beir, resolve_dataset
from services.evaluation.metrics import evaluate_run, validate_metrics
from services.evaluation.runner import EVAL_PRINCIPAL, Progress, eval_runtime, maxp
from services.evaluation.splits import select_queries
from services.models.routing_plans import write_plans
from services.orchestrator.runtime import Variant
from services.retrieval.embedder import Embedder, build_embedder
from services.retrieval.fusion import fuse
from services.retrieval.hybrid import HybridRetriever, SearchParams

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
    progress: Progress | None,
) -> dict[str, Candidates]:
    """Each query searched once over the cached index, both retrievers' lists filled in."""
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


def choose(
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


@dataclass(frozen=True)
class RoutingTune:
    """The grid's score per BM25 weight and level, the queries per level, the choice (the whole
    ``routing.plans`` table to set and the chosen weights with their scores), and what it was fitted
    on (sets, splits, step, metric: the data a route-plans artifact records)."""

    results: dict[str, dict[float, float]]
    counts: dict[str, int]
    plans: dict[str, dict[str, Any]]
    chosen: dict[str, dict[str, float]]
    data: dict[str, Any]


def tune_routing(
    settings: RampartSettings,
    *,
    low_set: Path,
    low_split: str,
    multi_hop_set: Path,
    step: float,
    metric: str,
    max_queries: int | None,
    cache_dir: Path,
    say: Callable[[str], None] = lambda _: None,
    progress: Progress | None = None,
) -> RoutingTune:
    """Route the multi-hop set's train half, search every query once, score the weight grid per level
    and choose (see the module docstring); ``say`` hears how the queries were grouped."""
    from services.orchestrator.routing.router import QueryRouter

    if low_split == "test":
        raise invalid("--low-split test: tune on a training/dev split (SciFact train), never on test")
    validate_metrics([metric])
    grid = weight_grid(step)
    embedder = build_embedder(settings.embedding, settings.models_dir)
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
    say(
        f"• {len(low_ids)} {low_ds.name} {low_split} queries for low; {len(multi_ids)} {multi_ds.name} "
        f"train-half queries routed medium {len(groups['medium'])}, high {len(groups['high'])}, "
        f"low {len(groups['low'])} (not used)"
    )
    low_c = collect(low_ds, low_ids, settings, embedder, cache_dir, progress)
    multi_c = collect(multi_ds, multi_ids, settings, embedder, cache_dir, progress)
    results: dict[str, dict[float, float]] = {
        "low": score_grid(low_c, low_ds.qrels, grid, settings, metric),
        "medium": score_grid(
            {q: multi_c[q] for q in groups["medium"]}, multi_ds.qrels, grid, settings, metric
        ),
        "high": score_grid({q: multi_c[q] for q in groups["high"]}, multi_ds.qrels, grid, settings, metric),
    }
    counts = {"low": len(low_ids), "medium": len(groups["medium"]), "high": len(groups["high"])}
    plans, chosen = choose(results, settings, counts)
    data = {
        "low": f"{low_ds.name} {low_split} qrels",
        "medium, high": f"{multi_ds.name} train query half, grouped by the routed complexity",
        "queries": counts,
        "step": step,
        "metric": metric,
        "scored": f"first-stage documents, re-fused with fusion.method {settings.fusion.method}",
        "max_queries": max_queries,
    }
    return RoutingTune(results, counts, plans, chosen, data)


def save_plans(tuned: RoutingTune, out_dir: Path, *, command: str) -> Path:
    """Write the chosen table as a route-plans artifact (:mod:`services.models.routing_plans`) with
    what it was fitted on and the chosen weights' scores."""
    metric = tuned.data["metric"]
    return write_plans(
        out_dir,
        tuned.plans,
        created=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command=command,
        data=tuned.data,
        figures={
            f"chosen {metric} (dev)": {lvl: c["score"] for lvl, c in tuned.chosen.items()},
            f"{metric} nearest the previous weights (dev)": {
                lvl: c["score_near_current"] for lvl, c in tuned.chosen.items()
            },
        },
        extra={"grid": {lvl: {str(w): s for w, s in r.items()} for lvl, r in tuned.results.items()}},
    )
