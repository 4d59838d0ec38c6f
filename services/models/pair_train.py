"""Fit the evidence-pair model (``rampart train pairs``; ``services/orchestrator/chain/pair_order.py``).

A conditional logit: for each training question, the pairs of its verified head documents compete in
one softmax, and the pair holding both supporting documents should win. Fitted with L-BFGS on an
L2-penalised log-likelihood (``lam``, on standardised features); eight weights, so a few hundred
questions suffice. Questions whose head lacks a supporting document teach nothing and are skipped.
The figures that choose ``lam`` come from k-fold cross-validation on the training questions only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize  # type: ignore[import-untyped]

from services.orchestrator.chain.pair_order import (
    PAIR_FEATURES,
    Array,
    PairDoc,
    PairModel,
    pair_features,
    pair_ranking,
)

KS = (2, 5, 10)  # all_supporting@k reported


@dataclass(frozen=True)
class PairTrainConfig:
    """``lam`` from 5-fold cross-validation on the HotpotQA-500 train half (the model card): 1, 10 and 30
    gave all_supporting@2 0.879 / 0.879 / 0.875 and @5 0.982 / 0.978 / 0.971; of the two best, the
    stronger penalty, since the held-out reranker scores are less sure than the ones it was fit on."""

    lam: float = 10.0
    folds: int = 5
    seed: int = 13
    cv_lams: tuple[float, ...] = (1.0, 10.0, 30.0)  # reported in the model card


@dataclass(frozen=True)
class PairExample:
    """One question: its head documents in served order, and which of them are supporting."""

    qid: str
    question: str
    docs: tuple[PairDoc, ...]
    doc_ids: tuple[str, ...]
    gold: frozenset[str]  # every supporting document id (some may be missing from the head)


@dataclass(frozen=True)
class _Featurised:
    example: PairExample
    x: Array
    pairs: list[tuple[int, int]]
    target: int | None  # index of the pair holding every supporting document, if the head has it


def featurise(examples: Sequence[PairExample]) -> list[_Featurised]:
    out = []
    for ex in examples:
        x, pairs = pair_features(ex.question, ex.docs)
        target = next(
            (k for k, (i, j) in enumerate(pairs) if {ex.doc_ids[i], ex.doc_ids[j]} == set(ex.gold)), None
        )
        out.append(_Featurised(ex, x, pairs, target))
    return out


def fit_pairs(rows: Sequence[_Featurised], lam: float, manifest: dict[str, Any] | None = None) -> PairModel:
    """Maximise the penalised conditional log-likelihood of each question's supporting pair."""
    items = [(r.x, r.target) for r in rows if r.target is not None and len(r.pairs) > 1]
    if not items:
        raise ValueError("no training question has both supporting documents in its head")
    stacked = np.vstack([x for x, _ in items])
    mean = stacked.mean(axis=0)
    scale = stacked.std(axis=0)
    scale[scale < 1e-9] = 1.0
    zs = [((x - mean) / scale, t) for x, t in items]

    def loss(w: Array) -> tuple[float, Array]:
        total = 0.5 * lam * float(w @ w)
        grad = lam * w
        for z, t in zs:
            s = z @ w
            top = s.max()
            e = np.exp(s - top)
            p = e / e.sum()
            total -= float(s[t] - top - math.log(e.sum()))
            grad = grad - (z[t] - p @ z)
        return total, grad

    res = minimize(loss, np.zeros(len(PAIR_FEATURES)), jac=True, method="L-BFGS-B")
    return PairModel(weights=np.asarray(res.x), mean=mean, scale=scale, manifest=dict(manifest or {}))


def ranked_ids(row: _Featurised, model: PairModel | None) -> list[str]:
    """The head's document ids as served (``model`` None) or as the pair model orders them."""
    ids = list(row.example.doc_ids)
    if model is None or len(ids) < 3:
        return ids
    return [ids[k] for k in pair_ranking(model.scores(row.x), row.pairs, len(ids))]


def all_supporting(rows: Sequence[_Featurised], model: PairModel | None) -> dict[str, float]:
    """Share of questions whose every supporting document is in the top k, for k in ``KS``."""
    out = {}
    for k in KS:
        hit = [set(r.example.gold) <= set(ranked_ids(r, model)[:k]) for r in rows]
        out[f"all_supporting@{k}"] = round(sum(hit) / max(len(hit), 1), 4)
    return out


def cross_validate(rows: Sequence[_Featurised], cfg: PairTrainConfig) -> dict[str, float]:
    """all_supporting@k of k-fold out-of-fold orderings (each question ordered by a model that did not
    see it), summed over folds."""
    order = np.random.default_rng(cfg.seed).permutation(len(rows))
    hits = {k: 0 for k in KS}
    for f in range(cfg.folds):
        held = set(order[f :: cfg.folds].tolist())
        model = fit_pairs([r for i, r in enumerate(rows) if i not in held], cfg.lam)
        for i in held:
            got = ranked_ids(rows[i], model)
            for k in KS:
                hits[k] += set(rows[i].example.gold) <= set(got[:k])
    return {f"all_supporting@{k}": round(v / max(len(rows), 1), 4) for k, v in hits.items()}


def _reranker_lines(reranker: dict[str, Any]) -> list[str]:
    """Which reranker scored the pipeline's passages, and whether its scores here are out-of-fold."""
    if reranker.get("hotpotqa_half") == "heldout":
        return [
            f"- Reranker `{reranker['model_id']}`, cross-fitted: trained on HotpotQA-500's `heldout` half,",
            "  so its scores on these questions are out-of-fold, as the served reranker's are on new",
            "  questions (a model fitted on the served reranker's scores of its own training questions",
            "  learns to trust them more than they deserve).",
        ]
    return [f"- Reranker `{reranker['model_id']}` (the served one)."]


def card(model: PairModel, summary: dict[str, Any]) -> str:
    """MODEL_CARD.md: data, command, cross-validated figures and the weights."""
    cv = summary["cross_validation"]
    lines = [
        f"# Model card: {summary['model_id']}",
        "",
        f"Built {summary['created']} by `{summary['command']}`.",
        "",
        "## What it is",
        "The evidence-pair model of the adaptive pipeline (`services/orchestrator/chain/pair_order.py`,",
        'docs/chain.md "Evidence pairs"): a conditional logit over the pairs of a Complex question\'s',
        "verified top documents; the best pair goes first, the rest by their chance of being in it.",
        "",
        "## Training data (training split only)",
        f"- {summary['dataset']} `{summary['split']}` questions, run through the routed pipeline as",
        f"  served (pair ordering off, the fact-check judging {summary['pair_depth']} results) over an index",
        "  built by Rampart's ingest.",
        *_reranker_lines(summary["reranker"]),
        f"- Questions read {summary['counts']['questions']}, routed to one search (not Complex)"
        f" {summary['counts']['not_complex']}, fewer than two head documents {summary['counts']['short_head']};",
        f"  examples {summary['examples']}, of which {summary['with_pair']} hold both supporting documents in"
        " their head (the others teach nothing).",
        "",
        f"## Cross-validation ({cv['folds']}-fold over the examples, out-of-fold orderings)",
        "| ordering | " + " | ".join(f"all_supporting@{k}" for k in KS) + " |",
        "|---|" + "---:|" * len(KS),
        "| as served (no pair model) | "
        + " | ".join(str(cv["served"][f"all_supporting@{k}"]) for k in KS)
        + " |",
    ]
    for lam, figures in cv["by_lam"].items():
        mark = " (shipped)" if float(lam) == summary["lam"] else ""
        lines.append(
            f"| pair model, lam {lam}{mark} | "
            + " | ".join(str(figures[f"all_supporting@{k}"]) for k in KS)
            + " |"
        )
    lines += [
        "",
        "## Weights (on standardised features)",
        "| feature | weight | mean | scale |",
        "|---|---:|---:|---:|",
        *(
            f"| {f} | {w:.3f} | {m:.3f} | {s:.3f} |"
            for f, w, m, s in zip(PAIR_FEATURES, model.weights, model.mean, model.scale, strict=True)
        ),
        "",
        "Held-out figures (the routed pipeline with this model) are in docs/benchmarks.md with their commands.",
        "",
    ]
    return "\n".join(lines)
