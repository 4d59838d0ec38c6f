"""``rampart tune factcheck``: pick the fact-check thresholds on dev attack sets, never on a test split.

Retrieval, reranking and per-document evidence (the expensive parts) run once per query; each grid
point then re-runs only the set-level classifier and the stage's keep/fallback rule — the product's
own code, through a checker that serves the precomputed evidence. The objective is the issue's: the
least poison in the final context while clean Recall@10 loses at most ``max_recall_loss`` (default
1 point, half the 2-point budget, so that a held-out set has room to differ).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from services.common.errors import invalid
from services.common.settings import RampartSettings
from services.common.types import ScoredChunk
from services.evaluation.attack import (
    Query,
    Trace,
    apply_factcheck,
    attack_queries,
    first_stages,
    load_attacks,
    poisoned_runtime,
    summarize,
)
from services.evaluation.beir import available_splits, load_beir, resolve_dataset
from services.evaluation.runner import Progress
from services.evaluation.splits import select_queries
from services.factcheck.checker import CheckOutcome
from services.factcheck.classifier import decide
from services.factcheck.config import FactCheckSettings
from services.factcheck.evidence import EVIDENCE_VERSION, CheckInput, Evidence, gather_evidence
from services.factcheck.stage import FactCheckStage, to_input
from services.models.factcheck_policy import write_policy
from services.orchestrator.runtime import Variant
from services.rerank.reranker import build_reranker
from services.rerank.stage import RerankStage
from services.retrieval.embedder import Embedder, build_embedder
from services.retrieval.retriever import Retriever

GRID: dict[str, list[Any]] = {
    # grids 5 and 6 settled the cluster rule near these (docs/journal/2026-11-23-factcheck-planted-copies.md)
    "duplicate_threshold": [0.84, 0.9],
    "duplicate_min_docs": [5],
    "context_depth": [30],
    "copy_threshold": [0.75, 0.8, 0.85],
    "copy_min_docs": [2, 3],
    # grid 6 added the planted-copies rule's border members (0 = off), grid 7 their slack
    # (docs/journal/2026-11-23-factcheck-border-members.md)
    "copy_border_threshold": [0.0, 0.7],
    "copy_border_slack": [0.0, 0.02, 0.05, 0.1, 1.0],
    # the planted-claim rule (0 = off); its guards (group coverage 0.5, length ratio 1.5) from a sweep
    # (docs/journal/2026-11-24-factcheck-planted-claim.md)
    "claim_join_threshold": [0.0, 0.55, 0.65],
    # ... and how much of the claim (weighted by rarity) a sibling must repeat (claim_max_words 6;
    # docs/journal/2026-11-24-factcheck-claim-share.md)
    "claim_share": [0.5, 1.0],
    # grid 3 settled these (docs/journal/2026-11-22-factcheck-first-defence.md)
    "conflict_threshold": [0.8],
    "coverage_threshold": [0.34],
    "relevance_threshold": [0.02, 0.1],
}


def _redundant(params: dict[str, Any]) -> bool:
    """A point that repeats another: the border slack means nothing with border members off, the claim
    share nothing with the planted-claim rule off."""
    return (params.get("copy_border_threshold") == 0.0 and params.get("copy_border_slack", 1.0) != 1.0) or (
        params.get("claim_join_threshold") == 0.0 and params.get("claim_share", 1.0) != 1.0
    )


@dataclass
class Case:
    query: str
    trace: Trace
    head: list[ScoredChunk]
    evidence: list[Evidence]


class PrecomputedChecker:
    """A FactChecker over evidence gathered once (see module doc)."""

    model_id = "precomputed"

    def __init__(self, case: Case, settings: FactCheckSettings) -> None:
        self.case = case
        self.settings = settings

    def check(
        self,
        query: str,
        items: Sequence[CheckInput],
        *,
        deadline_s: float,
        context: Sequence[CheckInput] = (),
        linked: bool = True,
    ) -> CheckOutcome:
        n, ev = len(items), self.case.evidence
        peers = list(zip(context, ev[n : n + len(context)], strict=True))
        settings = self.settings.for_corpus(linked)
        return CheckOutcome(decide(query, items, ev[:n], settings, context=peers))

    def check_ready(self) -> None:
        return None

    def close(self) -> None:
        return None


def collect_cases(
    queries: Sequence[Query],
    retriever: Retriever,
    rerank: RerankStage,
    embedder: Embedder,
    settings: RampartSettings,
    *,
    k: int,
    progress: Progress | None = None,
) -> list[Case]:
    cases = []
    for i, q in enumerate(queries, start=1):
        trace, head = first_stages(q, retriever, rerank, settings, k=k)
        evidence = gather_evidence(q.query, [to_input(h) for h in head], embedder, settings.factcheck)
        cases.append(Case(q.query, trace, head, evidence))
        if progress and (i % 10 == 0 or i == len(queries)):
            progress("collect", i, len(queries))
    return cases


CASES_FORMAT = 1
# The fact-check settings collection reads (retrieval depth and copy lookups, per-passage evidence);
# the rest only steer the set-level decision the grid re-runs, so changing them keeps the cases valid.
COLLECTION_FIELDS = ("depth", "context_depth", "copy_min_docs", "copy_border_threshold", "untrusted_sources")


def cases_key(inputs: dict[str, Any], settings: RampartSettings) -> str:
    """Fingerprint of what the collected cases depend on: the sets, the query counts, the models and
    every setting but the decision-only fact-check ones (hashed: the key names no value, secrets
    included), and the evidence recipe's version (a per-passage detector bumps it). Other code is not
    in it: after changing retrieval or reranking, delete the file (docs/factcheck.md)."""
    dump = settings.model_dump(mode="json")
    dump["factcheck"] = {f: dump["factcheck"][f] for f in COLLECTION_FIELDS}
    blob = json.dumps(
        {"format": CASES_FORMAT, "evidence": EVIDENCE_VERSION, "inputs": inputs, "settings": dump},
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


def save_cases(path: Path, key: str, cases: Sequence[Case]) -> None:
    """Keep collected cases for the next run with the same key (written atomically)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as f:
        pickle.dump({"key": key, "cases": list(cases)}, f, protocol=pickle.HIGHEST_PROTOCOL)
    tmp.replace(path)


def load_cases(path: Path, key: str) -> list[Case] | None:
    """Cases saved by :func:`save_cases` under the same key, else ``None`` (collect afresh).

    A pickle runs code when loaded: load only a file this machine's own tuning run wrote."""
    if not path.is_file():
        return None
    with path.open("rb") as f:
        saved = pickle.load(f)  # noqa: S301 - our own cache file, see docstring
    if not isinstance(saved, dict) or saved.get("key") != key:
        return None
    return list(saved["cases"])


def evaluate_cases(cases: Sequence[Case], settings: RampartSettings, *, k: int) -> dict[str, Any]:
    traces = [
        apply_factcheck(
            c.trace, c.query, c.head, FactCheckStage(PrecomputedChecker(c, settings.factcheck)), settings
        )
        for c in cases
    ]
    return summarize(traces, k=k, m=settings.factcheck.depth)


def fit_calibration(cases: Sequence[Case], depth: int) -> tuple[float, float]:
    """Platt scaling of the reranker logit on the clean queries' judged chunks (the top ``depth``;
    relevant = in qrels)."""
    xs, ys = [], []
    for c in cases:
        if c.trace.attacked:
            continue
        for h in c.head[:depth]:
            logit = h.scores.get("rerank")
            if logit is not None:
                xs.append(float(logit))
                ys.append(1.0 if c.trace.relevant.get(h.chunk.doc_id, 0) > 0 else 0.0)
    if len(set(ys)) < 2:
        return (1.0, 0.0)
    x, y = np.asarray(xs), np.asarray(ys)
    # Platt's smoothed targets keep the fit finite when the logits separate the classes perfectly
    n_pos, n_neg = float(y.sum()), float(len(y) - y.sum())
    y = np.where(y > 0, (n_pos + 1) / (n_pos + 2), 1 / (n_neg + 2))
    a, b = 1.0, 0.0
    for _ in range(50):  # Newton steps on the logistic log-likelihood (2 parameters)
        p = 1.0 / (1.0 + np.exp(-np.clip(a * x + b, -60, 60)))
        w = np.maximum(p * (1 - p), 1e-9)
        g = np.array([np.sum((p - y) * x), np.sum(p - y)])
        hess = np.array([[np.sum(w * x * x), np.sum(w * x)], [np.sum(w * x), np.sum(w)]]) + 1e-6 * np.eye(2)
        step = np.linalg.solve(hess, g)
        a, b = a - step[0], b - step[1]
        if float(np.abs(step).max()) < 1e-8:
            break
    return (round(float(a), 4), round(float(b), 4))


def grid_search(
    cases: Sequence[Case],
    settings: RampartSettings,
    *,
    k: int,
    max_recall_loss: float = 0.01,
    max_attacked_recall_loss: float = 0.05,
    grid: dict[str, list[Any]] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(best parameters, every grid point's figures)``; best = least poison in context among the points
    within both recall budgets, ties broken by the smaller clean recall loss.

    The second budget is on the *attacked* questions' own evidence: a rule that removes the planted
    passages together with the genuine ones on the same subject leaves a clean but empty context,
    which is no defence for the user asking."""
    grid = grid or GRID
    rows = []
    names = list(grid)
    for values in itertools.product(*(grid[n] for n in names)):
        params = dict(zip(names, values, strict=True))
        if _redundant(params):
            continue
        s = settings.model_copy(update={"factcheck": settings.factcheck.model_copy(update=params)})
        f = evaluate_cases(cases, s, k=k)
        loss = f["clean_recall@10_without_factcheck"] - f["clean_recall@10_with_factcheck"]
        rows.append(
            {
                **params,
                "poison_in_context": f["poison_in_context"],
                "clean_recall_loss": round(loss, 4),
                "attacked_recall_loss": round(
                    f["attacked_recall@10_without_factcheck"] - f["attacked_recall@10_with_factcheck"], 4
                ),
                "corrupt_precision": f["detection"]["corrupt"]["precision"],
                "corrupt_recall": f["detection"]["corrupt"]["recall"],
            }
        )
    ok = [
        r
        for r in rows
        if r["clean_recall_loss"] <= max_recall_loss + 1e-9
        and r["attacked_recall_loss"] <= max_attacked_recall_loss + 1e-9
    ] or rows
    best = min(ok, key=lambda r: (r["poison_in_context"], r["clean_recall_loss"], -r["duplicate_threshold"]))
    return {n: best[n] for n in names}, rows


def parse_attack_set(spec: str) -> tuple[str, str, str]:
    """``CORPUS_DIR::ATTACKS_JSON[::train|heldout]`` → ``(corpus, attacks, query split)``."""
    parts = spec.split("::")
    if len(parts) not in (2, 3):
        raise invalid(f"--set {spec!r}: write CORPUS_DIR::ATTACKS_JSON or CORPUS_DIR::ATTACKS_JSON::train")
    query_split = parts[2] if len(parts) == 3 else "all"
    if query_split not in ("all", "train", "heldout"):
        raise invalid(f"--set {spec!r}: the query split must be all, train or heldout")
    return parts[0], parts[1], query_split


def gathering_settings(settings: RampartSettings) -> RampartSettings:
    """``settings`` with the fact-check reading as much as any grid point does: evidence is gathered
    once for the widest context window the grid tries (and with the near-copies of every border)."""
    widest = max([settings.factcheck.context_depth, *GRID["context_depth"]])
    borders = [b for b in [settings.factcheck.copy_border_threshold, *GRID["copy_border_threshold"]] if b > 0]
    gather = {
        "context_depth": widest,
        "copy_min_docs": max([settings.factcheck.copy_min_docs, *GRID["copy_min_docs"]]),
        "copy_border_threshold": min(borders, default=0.0),
    }
    return settings.model_copy(update={"factcheck": settings.factcheck.model_copy(update=gather)})


@dataclass(frozen=True)
class FactCheckTune:
    """What ``rampart tune factcheck`` reports: the cases, the fitted calibration, the best grid point,
    every point's figures, and what it was fitted on (sets, query count, depth, budgets: the data a
    policy artifact records)."""

    cases: list[Case]
    calibration: tuple[float, float]
    best: dict[str, Any]
    rows: list[dict[str, Any]]
    data: dict[str, Any]


def tune_factcheck(
    settings: RampartSettings,
    sets: list[str],
    *,
    clean_queries: int,
    k: int,
    max_recall_loss: float,
    max_attacked_recall_loss: float,
    cases_file: Path | None = None,
    say: Callable[[str], None] = lambda _: None,
    progress: Progress | None = None,
) -> FactCheckTune:
    """Collect the cases of every set (``CORPUS_DIR::ATTACKS_JSON[::train|heldout]``; or reuse
    ``cases_file`` while its key matches), fit the reranker calibration, then grid-search."""
    wide = gathering_settings(settings)
    embedder = build_embedder(settings.embedding, settings.models_dir)
    reranker = (
        build_reranker(settings.rerank, settings.models_dir) if settings.rerank.enabled else None
    )  # one for every set
    # retrieval and reranking as served; the fact-check's evidence is gathered by collect_cases
    variant = Variant(rerank=reranker is not None, factcheck=False, rerank_cache=200_000)
    key = cases_key({"sets": sets, "clean_queries": clean_queries, "k": k}, wide)
    cached = load_cases(cases_file, key) if cases_file else None
    if cached is not None:
        say(f"reusing {len(cached)} collected queries from {cases_file}")
    cases = cached or []
    for spec in [] if cached is not None else sets:
        corpus, attacks_path, query_split = parse_attack_set(spec)
        root = resolve_dataset(Path(corpus), settings)
        splits = available_splits(root)
        if len(splits) != 1 and query_split != "train":
            raise invalid(f"{root} has qrels splits {splits}: tune on one split only, or on ::train")
        dataset = load_beir(root, splits[0])
        attacks = load_attacks(Path(attacks_path))
        if query_split != "all":
            keep = set(select_queries([a.qid for a in attacks] + list(dataset.queries), query_split))  # type: ignore[arg-type]
            attacks = [a for a in attacks if a.qid in keep]
            dataset = replace(dataset, queries={q: t for q, t in dataset.queries.items() if q in keep})
        with poisoned_runtime(
            dataset,
            attacks,
            settings,
            settings.data_dir / "eval-cache",
            embedder=embedder,
            reranker=reranker,
            variant=variant,
            progress=progress,
        ) as runtime:
            queries = attack_queries(dataset, attacks, clean_queries)
            cases += collect_cases(
                queries,
                runtime.search.retriever,
                runtime.search.rerank,
                embedder,
                wide,
                k=k,
                progress=progress,
            )
    if cases_file and cached is None:
        save_cases(cases_file, key, cases)
    calibration = fit_calibration(cases, settings.factcheck.depth)
    tuned = settings.model_copy(
        update={"factcheck": settings.factcheck.model_copy(update={"calibration": calibration})}
    )
    best, rows = grid_search(
        cases, tuned, k=k, max_recall_loss=max_recall_loss, max_attacked_recall_loss=max_attacked_recall_loss
    )
    data = {
        "sets": sets,
        "clean_queries_per_set": clean_queries,
        "cases": len(cases),
        "k": k,
        "objective": "least poison in the final context",
        "max_recall_loss": max_recall_loss,
        "max_attacked_recall_loss": max_attacked_recall_loss,
    }
    return FactCheckTune(cases, calibration, best, rows, data)


def save_policy(tuned: FactCheckTune, out_dir: Path, *, command: str) -> Path:
    """Write the fitted calibration and the chosen grid point as a policy artifact
    (:mod:`services.models.factcheck_policy`) with what they were fitted on and the point's figures."""
    chosen = next(r for r in tuned.rows if all(r[n] == v for n, v in tuned.best.items()))
    return write_policy(
        out_dir,
        {**tuned.best, "calibration": tuned.calibration},
        created=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command=command,
        data=tuned.data,
        figures={"chosen point (dev)": {m: v for m, v in chosen.items() if m not in tuned.best}},
        extra={"grid_points": len(tuned.rows)},
    )
