"""Paired significance tests between two pipelines' per-query scores (e.g. nDCG@10).

``randomization`` is the paired (sign-flip) randomisation test recommended for IR by Smucker et al.
(CIKM '07): under H0 each query's pair of scores is exchangeable, so the sign of each per-query
difference is flipped at random and the two-sided p-value is the share of permutations whose mean
difference is at least as extreme as the observed one, with the +1 correction so p is never 0. It uses
numpy's seeded ``Generator`` and is deterministic (ranx's own Fisher test re-seeds inside a
numba-parallel loop, so it is not reproducible across thread counts). ``t-test`` is the two-sided
paired Student's t-test (scipy's ``ttest_rel``, through ranx).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from services.common.errors import invalid

if TYPE_CHECKING:
    from services.evaluation.runner import PipelineSpec

TestMethod = Literal["randomization", "t-test"]

_MAX_CHUNK_CELLS = 4_000_000  # sign matrix cells per batch (~32 MB of float64)


class SignificanceResult(BaseModel):
    """Outcome of comparing ``candidate`` against ``baseline`` on one metric."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    baseline: str
    candidate: str
    method: TestMethod
    num_queries: int
    baseline_mean: float
    candidate_mean: float
    delta: float
    p_value: float
    alpha: float
    significant: bool
    wins: int
    ties: int
    losses: int

    def summary(self) -> str:
        """One line for reports, e.g. ``hybrid vs bm25 nDCG@10 +0.042 (p=0.003, significant at 0.05)``."""
        verdict = "significant" if self.significant else "not significant"
        return (
            f"{self.candidate} vs {self.baseline} {self.metric} {self.delta:+.4f} "
            f"(p={self.p_value:.4g}, {verdict} at {self.alpha:g}; "
            f"{self.wins}W/{self.ties}T/{self.losses}L over {self.num_queries} queries, {self.method})"
        )


def paired_test(
    baseline: Mapping[str, float],
    candidate: Mapping[str, float],
    *,
    metric: str = "ndcg@10",
    baseline_name: str = "baseline",
    candidate_name: str = "candidate",
    method: TestMethod = "randomization",
    n_permutations: int = 10_000,
    alpha: float = 0.05,
    seed: int = 42,
) -> SignificanceResult:
    """Compare two per-query score maps (``{query_id: value}``, e.g. one metric's entry of
    :func:`~services.evaluation.metrics.evaluate_run_per_query`). Both must cover the same queries."""
    if set(baseline) != set(candidate):
        only_b = sorted(set(baseline) - set(candidate))[:5]
        only_c = sorted(set(candidate) - set(baseline))[:5]
        raise invalid(
            f"per-query scores cover different queries (only in {baseline_name}: {only_b}, only in "
            f"{candidate_name}: {only_c}); evaluate both runs against the same qrels",
        )
    if len(baseline) < 2:
        raise invalid(f"a paired test needs at least 2 queries, got {len(baseline)}")
    if not 0.0 < alpha < 1.0:
        raise invalid(f"alpha must be in (0, 1), got {alpha}")
    if n_permutations < 1:
        raise invalid(f"n_permutations must be >= 1, got {n_permutations}")
    qids = sorted(baseline)
    a = np.array([float(baseline[q]) for q in qids], dtype=np.float64)
    b = np.array([float(candidate[q]) for q in qids], dtype=np.float64)
    if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
        raise invalid("per-query scores must be finite numbers")

    if method == "randomization":
        p = _randomization_p(b - a, n_permutations, seed)
    elif method == "t-test":
        p = _t_test_p(a, b)
    else:
        raise invalid(f"unknown test method {method!r}; use 'randomization' or 't-test'")

    diff = b - a
    return SignificanceResult(
        metric=metric,
        baseline=baseline_name,
        candidate=candidate_name,
        method=method,
        num_queries=len(qids),
        baseline_mean=float(a.mean()),
        candidate_mean=float(b.mean()),
        delta=float(diff.mean()),
        p_value=p,
        alpha=alpha,
        significant=p < alpha,
        wins=int(np.sum(diff > 0)),
        ties=int(np.sum(diff == 0)),
        losses=int(np.sum(diff < 0)),
    )


def compare_pipelines(
    per_query: Mapping[str, Mapping[str, Mapping[str, float]]],
    baseline: str,
    *,
    metric: str = "ndcg@10",
    method: TestMethod = "randomization",
    n_permutations: int = 10_000,
    alpha: float = 0.05,
    seed: int = 42,
) -> list[SignificanceResult]:
    """Test every pipeline against ``baseline``. ``per_query`` is ``{pipeline: {metric: {qid: value}}}``
    (i.e. :func:`~services.evaluation.metrics.evaluate_run_per_query` output per pipeline)."""
    if baseline not in per_query:
        raise invalid(f"baseline pipeline {baseline!r} not found; have {sorted(per_query)}")
    results: list[SignificanceResult] = []
    for name, scores in per_query.items():
        if name == baseline:
            continue
        if metric not in scores or metric not in per_query[baseline]:
            raise invalid(f"metric {metric!r} missing from per-query scores of {name!r} or {baseline!r}")
        results.append(
            paired_test(
                per_query[baseline][metric],
                scores[metric],
                metric=metric,
                baseline_name=baseline,
                candidate_name=name,
                method=method,
                n_permutations=n_permutations,
                alpha=alpha,
                seed=seed,
            )
        )
    return results


def _randomization_p(diff: np.ndarray, n_permutations: int, seed: int) -> float:
    observed = abs(float(diff.mean()))
    if observed == 0.0:
        return 1.0
    rng = np.random.default_rng(seed)
    n = diff.shape[0]
    tolerance = 1e-12 * max(1.0, observed)  # float noise must not turn "equal" into "smaller"
    extreme = 0
    done = 0
    chunk = max(1, _MAX_CHUNK_CELLS // n)
    while done < n_permutations:
        m = min(chunk, n_permutations - done)
        signs = rng.integers(0, 2, size=(m, n), dtype=np.int8).astype(np.float64) * 2.0 - 1.0
        means = np.abs(signs @ diff) / n
        extreme += int(np.count_nonzero(means >= observed - tolerance))
        done += m
    return (extreme + 1) / (n_permutations + 1)


def _t_test_p(a: np.ndarray, b: np.ndarray) -> float:
    diff = b - a
    if np.all(diff == diff[0]):
        # Zero variance: scipy returns NaN (all equal) or p=0 with a warning (constant shift).
        return 1.0 if diff[0] == 0 else 0.0
    from ranx.statistical_tests import paired_student_t_test  # lazy: ranx import is slow

    p, _ = paired_student_t_test(a, b, max_p=1.0)
    p = float(p)
    return 1.0 if math.isnan(p) else p


def standard_comparisons(
    per_query: Mapping[str, Mapping[str, Mapping[str, float]]], specs: Sequence[PipelineSpec]
) -> list[SignificanceResult]:
    """The tests ``rampart eval`` reports for the pipelines it ran: each single-shot hybrid against
    BM25 and against dense, each reranked pipeline against its first stage, and each chain against the
    single-shot search of its hops (on all_supporting@2, what a chain is for)."""
    from services.evaluation.runner import CHAIN_HOP_DEFAULT

    significance = []
    for base in ("bm25", "dense"):
        if base in per_query and len(per_query) > 1:
            significance += [
                r
                for r in compare_pipelines(per_query, base)
                if r.candidate.startswith("hybrid") and "+" not in r.candidate
            ]
    for first in {s.name.split("+")[0] for s in specs if s.rerank}:
        if first in per_query:
            significance += [
                r for r in compare_pipelines(per_query, first) if r.candidate.startswith(first + "+")
            ]
    chain_hops = {s.name: s.name.partition("@")[2] or CHAIN_HOP_DEFAULT for s in specs if s.chain_beams}
    for hop in set(chain_hops.values()) & set(per_query):  # chains vs single-shot with their hop search
        significance += [
            r
            for r in compare_pipelines(per_query, hop, metric="all_supporting@2")
            if chain_hops.get(r.candidate) == hop
        ]
    return significance
