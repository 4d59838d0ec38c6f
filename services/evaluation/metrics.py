"""Retrieval metrics via ranx, with the edge cases made explicit.

All metric formulas come from ``ranx`` (``ndcg`` is the Järvelin linear-gain nDCG that BEIR /
pytrec_eval report; ``mrr@k`` and ``recall@k`` cut at k), except ``all_supporting@k`` (every
relevant document in the top k: multi-hop questions need all their evidence), which ranx lacks and
:func:`all_supporting` computes. This module only shapes the input:

* **Every judged query counts.** The query set is the qrels' query set. A query missing from ``run``,
  or present with no results, scores 0 on every metric and stays in the mean. (ranx itself asserts
  that run and qrels have identical query ids, and only with ``make_comparable=True`` *and*
  ``Qrels``/``Run`` objects pads missing queries; with every query empty it crashes on ``max()`` of an
  empty sequence. So empty queries are filled with 0 here and never handed to ranx.)
* Run queries that have no qrels are ignored (they cannot be scored).
* Judgements with relevance <= 0 are "judged not relevant"; a query with no positive judgement scores
  0 (ranx's ``rel_lvl=1`` behaviour, same as trec_eval's).
* **Ties are broken deterministically** like trec_eval: by score descending, then doc id descending.
  ranx sorts with an unstable ``argsort`` so tied documents would otherwise land in arbitrary order.

ranx compiles its kernels with numba on first use (tens of seconds on a cold cache, a few seconds to
load the cache afterwards) and takes ~3 s to import, so it is imported lazily inside functions.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from services.common.errors import invalid

QrelsDict = Mapping[str, Mapping[str, int]]
RunDict = Mapping[str, Mapping[str, float]]

DEFAULT_METRICS: tuple[str, ...] = ("ndcg@10", "recall@100", "mrr@10")

# Metric names ranx understands: name[@k][-l<rel_lvl>], plus rbp.<persistence>.
_RANX_METRICS = (
    "hits",
    "hit_rate",
    "precision",
    "recall",
    "f1",
    "r-precision",
    "mrr",
    "map",
    "dcg",
    "dcg_burges",
    "ndcg",
    "ndcg_burges",
    "bpref",
)
_METRIC_RE = re.compile(
    r"^(?:" + "|".join(map(re.escape, _RANX_METRICS)) + r")(?:@[1-9]\d*)?(?:-l[1-9]\d*)?$"
)
_RBP_RE = re.compile(r"^rbp\.\d+$")
# Computed here, not by ranx: 1.0 when every relevant document of the query is in the top k.
_ALL_SUPPORTING_RE = re.compile(r"^all_supporting@([1-9]\d*)$")
_SURROGATE_WIDTH = 12


def validate_metrics(metrics: Iterable[str]) -> tuple[str, ...]:
    """Check metric names against ranx's syntax; returns them de-duplicated, in order."""
    if isinstance(metrics, str):
        metrics = (metrics,)
    out: list[str] = []
    for m in metrics:
        if not isinstance(m, str) or not (
            _METRIC_RE.match(m) or _RBP_RE.match(m) or _ALL_SUPPORTING_RE.match(m)
        ):
            raise invalid(
                f"unknown metric {m!r}; use ranx names such as 'ndcg@10', 'recall@100', 'mrr@10', "
                f"'map@100', 'precision@5' (supported: {', '.join(_RANX_METRICS)}, rbp.<p>, "
                "all_supporting@<k>)",
                metric=str(m),
            )
        if m not in out:
            out.append(m)
    if not out:
        raise invalid("no metrics requested; pass e.g. ('ndcg@10', 'recall@100', 'mrr@10')")
    return tuple(out)


def evaluate_run(
    qrels: QrelsDict, run: RunDict, metrics: Sequence[str] = DEFAULT_METRICS
) -> dict[str, float]:
    """Mean of each metric over **all** judged queries (missing / empty queries count as 0)."""
    per_query = evaluate_run_per_query(qrels, run, metrics)
    return {m: float(np.mean(list(scores.values()))) for m, scores in per_query.items()}


def evaluate_run_per_query(
    qrels: QrelsDict, run: RunDict, metrics: Sequence[str] = DEFAULT_METRICS
) -> dict[str, dict[str, float]]:
    """``{metric: {query_id: value}}`` for every query in ``qrels`` (in qrels order).

    Queries without results get 0.0; run queries without qrels are ignored.
    """
    names = validate_metrics(metrics)
    clean_qrels = _clean_qrels(qrels)
    clean_run = _clean_run(run, clean_qrels)

    per_query: dict[str, dict[str, float]] = {m: dict.fromkeys(clean_qrels, 0.0) for m in names}
    for m in names:
        found = _ALL_SUPPORTING_RE.match(m)
        if found:
            per_query[m].update(all_supporting(clean_qrels, clean_run, int(found.group(1))))
    names = tuple(m for m in names if not _ALL_SUPPORTING_RE.match(m))
    if not clean_run or not names:
        return per_query  # nothing retrieved at all: every query is 0 (and ranx would crash)

    from ranx import Qrels, Run, evaluate  # lazy: ~3 s import + numba JIT

    judged = {qid: clean_qrels[qid] for qid in clean_run}
    surrogate_qrels, surrogate_run = _fixed_width_ids(judged, clean_run)
    ranx_qrels = Qrels(surrogate_qrels)
    ranx_run = Run(surrogate_run)
    evaluate(ranx_qrels, ranx_run, list(names), return_mean=False, save_results_in_run=True)
    for m in names:
        scores = ranx_run.scores[m]
        for qid in clean_run:
            per_query[m][qid] = float(scores[qid])
    return per_query


def all_supporting(
    qrels: Mapping[str, Mapping[str, int]], run: Mapping[str, Mapping[str, float]], k: int
) -> dict[str, float]:
    """Per query, 1.0 if every relevant (> 0) document is in the run's top ``k``, else 0.0.

    Multi-hop answers need all their supporting passages at once, which recall@k (the average share
    found) hides. Higher scores rank first, ties broken by doc id descending as trec_eval does; a query with no relevant document or no results scores 0, like the ranx metrics.
    """
    if k < 1:
        raise invalid(f"all_supporting@{k}: k must be at least 1")
    out: dict[str, float] = {}
    for qid, judged in qrels.items():
        relevant = {d for d, rel in judged.items() if rel > 0}
        results = run.get(qid, {})
        by_id = sorted(results.items(), key=lambda it: it[0], reverse=True)  # ties: doc id descending
        top = {d for d, _ in sorted(by_id, key=lambda it: -it[1])[:k]}
        out[qid] = 1.0 if relevant and relevant <= top else 0.0
    return out


def _clean_qrels(qrels: QrelsDict) -> dict[str, dict[str, int]]:
    if not isinstance(qrels, Mapping) or not qrels:
        raise invalid("qrels are empty; evaluation needs at least one judged query")
    out: dict[str, dict[str, int]] = {}
    for qid, judged in qrels.items():
        if not isinstance(qid, str) or not qid:
            raise invalid(f"qrels query id must be a non-empty string, got {qid!r}")
        if not isinstance(judged, Mapping) or not judged:
            raise invalid(
                f"qrels for query {qid!r} are empty; drop the query or add judgements", query_id=qid
            )
        row: dict[str, int] = {}
        for doc_id, rel in judged.items():
            if not isinstance(doc_id, str) or not doc_id:
                raise invalid(f"qrels doc id for query {qid!r} must be a non-empty string, got {doc_id!r}")
            if isinstance(rel, bool) or not isinstance(rel, int | np.integer):
                raise invalid(
                    f"qrels relevance for ({qid!r}, {doc_id!r}) must be an integer, got {rel!r}",
                    query_id=qid,
                    doc_id=doc_id,
                )
            row[doc_id] = int(rel)
        out[qid] = row
    return out


def _clean_run(run: RunDict, qrels: Mapping[str, object]) -> dict[str, dict[str, float]]:
    """Keep judged, non-empty queries; replace scores by rank-derived ones (ties: doc id descending)."""
    if not isinstance(run, Mapping):
        raise invalid(f"run must be a mapping query_id -> {{doc_id: score}}, got {type(run).__name__}")
    out: dict[str, dict[str, float]] = {}
    for qid, results in run.items():
        if qid not in qrels:
            continue
        if not isinstance(results, Mapping):
            raise invalid(
                f"run results for query {qid!r} must be a mapping doc_id -> score, "
                f"got {type(results).__name__}",
                query_id=qid,
            )
        if not results:
            continue
        items: list[tuple[str, float]] = []
        for doc_id, score in results.items():
            if not isinstance(doc_id, str) or not doc_id:
                raise invalid(f"run doc id for query {qid!r} must be a non-empty string, got {doc_id!r}")
            if isinstance(score, bool) or not isinstance(score, int | float | np.number):
                raise invalid(f"run score for ({qid!r}, {doc_id!r}) must be a number, got {score!r}")
            value = float(score)
            if not math.isfinite(value):
                raise invalid(
                    f"run score for ({qid!r}, {doc_id!r}) is {value}; scores must be finite",
                    query_id=qid,
                    doc_id=doc_id,
                )
            items.append((doc_id, value))
        # trec_eval order: score desc, then doc id desc. Two stable sorts give exactly that.
        items.sort(key=lambda it: it[0], reverse=True)
        items.sort(key=lambda it: it[1], reverse=True)
        n = len(items)
        out[qid] = {doc_id: float(n - rank) for rank, (doc_id, _) in enumerate(items)}
    return out


def _fixed_width_ids(
    qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]]
) -> tuple[dict[str, dict[str, int]], dict[str, dict[str, float]]]:
    """Rename doc ids to fixed-width surrogates (same id -> same surrogate in qrels and run).

    ranx packs doc ids into numpy ``<U{longest id}`` arrays before calling its numba kernels, so every
    new longest-id length is a new type signature and triggers a fresh JIT compile (~10-40 s each,
    then cached on disk). Fixed-width ids keep it to one signature for every dataset.
    """
    ids: dict[str, str] = {}

    def sid(doc_id: str) -> str:
        s = ids.get(doc_id)
        if s is None:
            s = ids[doc_id] = f"{len(ids):0{_SURROGATE_WIDTH}d}"
        return s

    new_qrels = {qid: {sid(d): rel for d, rel in judged.items()} for qid, judged in qrels.items()}
    new_run = {qid: {sid(d): score for d, score in results.items()} for qid, results in run.items()}
    return new_qrels, new_run


# ---------------------------------------------------------------------------------------------------
# Latency
# ---------------------------------------------------------------------------------------------------


def latency_percentile(latencies_ms: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100, linear interpolation) of per-query latencies in ms."""
    if not 0.0 <= q <= 100.0:
        raise invalid(f"percentile must be within [0, 100], got {q}")
    arr = np.asarray(list(latencies_ms), dtype=np.float64)
    if arr.size == 0:
        raise invalid("no latencies recorded; time at least one query before summarising")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise invalid("latencies must be finite, non-negative milliseconds")
    return float(np.percentile(arr, q))


def nearest_rank(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in [0, 1], rounded to 0.01); 0.0 for no values. A value that was
    measured, unlike :func:`latency_percentile`'s interpolation: what the small benchmarks report."""
    if not values:
        return 0.0
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 2)


def latency_ms_p50(latencies_ms: Sequence[float]) -> float:
    return latency_percentile(latencies_ms, 50.0)


def latency_ms_p95(latencies_ms: Sequence[float]) -> float:
    return latency_percentile(latencies_ms, 95.0)


def latency_summary(latencies_ms: Sequence[float]) -> dict[str, float]:
    """``{"latency_ms_p50": …, "latency_ms_p95": …}`` ready to merge into a report's pipeline entry."""
    return {"latency_ms_p50": latency_ms_p50(latencies_ms), "latency_ms_p95": latency_ms_p95(latencies_ms)}
