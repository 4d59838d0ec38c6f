"""Score fusion of several ranked lists: min-max (with optional bounds), z-score and RRF.

Documents found by only one retriever (the rule, also in docs/retrieval.md):
- The hybrid retriever normally *fills in* the missing score — a dense-only chunk is scored by BM25
  on the same query, a BM25-only chunk gets its cosine from the stored vector — so every candidate has
  every score and no rule is needed (``fill_missing=True``, the default).
- Where a score is still missing (``fill_missing=False``), min-max and z-score give that retriever's
  contribution as its *lowest observed* normalised value (the chunk is treated as no better than the
  worst candidate that retriever returned, never as average), and RRF gives it no contribution
  (the standard RRF rule: only lists that contain an item vote for it).
Weights are used as given (they need not sum to 1) and must not all be zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic.config import JsonDict

from services.common.errors import invalid
from services.common.types import FusionMethod, Retriever

RETRIEVERS = tuple(r.value for r in Retriever)


def weights_problem(weights: Mapping[str, float]) -> tuple[str, str] | None:
    """``(field, why)`` when per-retriever fusion weights are unusable, else ``None``: an unknown
    retriever would be refused by the search anyway, a negative or non-finite weight would invert or
    swamp a retriever's scores, and all zero (or none) leaves nothing to rank by. One rule for the HTTP
    request model and the gRPC wire; :func:`weights_json_schema` states it in the OpenAPI document."""
    unknown = sorted(set(weights) - set(RETRIEVERS))
    if unknown:
        return "weights", f"unknown retriever(s) {unknown} in weights; use {', '.join(RETRIEVERS)}"
    for name, w in weights.items():
        if not math.isfinite(w) or w < 0:
            why = f"weights[{name!r}] = {w} must be a finite number >= 0 (0 disables that retriever)"
            return f"weights.{name}", why
    if not any(w > 0 for w in weights.values()):
        return "weights", "every retriever weight is 0; give bm25 or dense a weight > 0"
    return None


def weights_json_schema() -> JsonDict:
    """:func:`weights_problem` in JSON Schema, for the object of weights: known retriever names only,
    each a number >= 0 (JSON has no non-finite numbers), and at least one of them > 0."""
    return {
        "propertyNames": {"enum": list(RETRIEVERS)},
        "additionalProperties": {"type": "number", "minimum": 0},
        "anyOf": [{"required": [n], "properties": {n: {"exclusiveMinimum": 0}}} for n in RETRIEVERS],
    }


@dataclass(frozen=True)
class Bounds:
    """Fixed normalisation bounds (e.g. cosine in [0, 1]); ``None`` uses the list's own min/max."""

    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Fused:
    key: int
    score: float
    contributions: dict[str, float]


def _minmax(scores: Mapping[int, float], bounds: Bounds) -> dict[int, float]:
    if not scores:
        return {}
    lo = bounds.low if bounds.low is not None else min(scores.values())
    hi = bounds.high if bounds.high is not None else max(scores.values())
    if hi <= lo:
        return dict.fromkeys(scores, 1.0)  # one distinct value: all equally good
    return {k: min(1.0, max(0.0, (v - lo) / (hi - lo))) for k, v in scores.items()}


def _zscore(scores: Mapping[int, float]) -> dict[int, float]:
    if not scores:
        return {}
    values = list(scores.values())
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    if std == 0.0:
        return dict.fromkeys(scores, 0.0)
    return {k: (v - mean) / std for k, v in scores.items()}


def fuse(
    lists: Mapping[str, Sequence[tuple[int, float]]],
    weights: Mapping[str, float],
    *,
    method: FusionMethod = FusionMethod.MINMAX,
    rrf_k: int = 60,
    bounds: Mapping[str, Bounds] | None = None,
    rank_lists: Mapping[str, Sequence[int]] | None = None,
) -> list[Fused]:
    """Fuse ``{retriever: [(key, score), ...]}`` into one list, best first.

    ``lists`` may contain filled-in scores for keys a retriever did not itself retrieve; RRF ranks
    use ``rank_lists`` (each retriever's own ranking) when given, else the order of ``lists``.
    Ties break on the key so results are deterministic.
    """
    if any(w < 0 for w in weights.values()):
        raise invalid(f"fusion weights must be >= 0, got {dict(weights)}")
    active = {name: w for name, w in weights.items() if w > 0 and name in lists}
    if not active:
        raise invalid(
            f"all fusion weights are zero for retrievers {sorted(lists)}; give at least one a weight > 0"
        )
    keys: set[int] = set()
    for name in active:
        keys.update(k for k, _ in lists[name])
    bounds = bounds or {}
    contributions: dict[int, dict[str, float]] = {k: {} for k in keys}

    for name, w in active.items():
        if method is FusionMethod.RRF:
            order = rank_lists[name] if rank_lists and name in rank_lists else [k for k, _ in lists[name]]
            for rank, key in enumerate(order, start=1):
                if key in contributions:
                    contributions[key][name] = w / (rrf_k + rank)
            continue
        raw = dict(lists[name])
        norm = _minmax(raw, bounds.get(name, Bounds())) if method is FusionMethod.MINMAX else _zscore(raw)
        floor = min(norm.values()) if norm else 0.0
        for key in keys:
            contributions[key][name] = w * norm.get(key, floor)

    fused = [Fused(k, sum(c.values()), c) for k, c in contributions.items()]
    fused.sort(key=lambda f: (-f.score, f.key))
    return fused
