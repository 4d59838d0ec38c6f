"""Fit and measure the query router (``rampart train router``, ``rampart eval router``).

Two scikit-learn logistic regressions (multinomial, class-balanced): the type head on every training
query (with its history), the complexity head on the questions that stand alone (the label of a
follow-up is its source's, which the router reads from the last turn). The fitted coefficients are
saved as numpy arrays (``RouterWeights.save``); serving never imports scikit-learn.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from services.models.router_data import LabelledQuery
from services.orchestrator.plan import Complexity, QueryType
from services.orchestrator.routing.features import Vector, cheap_features, feature_matrix
from services.orchestrator.routing.router import LinearHead, QueryRouter, RouterWeights
from services.retrieval.embedder import Embedder

Progress = Callable[[str, int, int], None]
BATCH = 256


@dataclass(frozen=True)
class RouterTrainConfig:
    """Hyper-parameters, set a priori and not tuned (docs/routing.md)."""

    c: float = 1.0  # inverse L2 strength of both heads (scikit-learn's default)
    # The embedding has unit norm (per-dimension spread ~0.05) while the cues are standardised; x4
    # brings its dimensions closer to the cues' scale so one L2 penalty suits both.
    embedding_scale: float = 4.0
    seed: int = 13
    max_iter: int = 3000


@dataclass(frozen=True)
class Featurised:
    """Features of a set of labelled rows, computed once (embedding is the slow part)."""

    cheap: Vector
    q_emb: Vector
    last_emb: Vector
    standalone_cheap: Vector  # the query's cues without its history (complexity head input)


def featurise(
    embedder: Embedder, rows: Sequence[LabelledQuery], progress: Progress | None = None, name: str = "embed"
) -> Featurised:
    parts: list[tuple[Vector, Vector, Vector]] = []
    for start in range(0, len(rows), BATCH):
        batch = rows[start : start + BATCH]
        parts.append(feature_matrix(embedder, [r.query for r in batch], [r.history for r in batch]))
        if progress:
            progress(name, min(start + BATCH, len(rows)), len(rows))
    dim = embedder.dim
    cheap = np.vstack([p[0] for p in parts]) if parts else np.zeros((0, 0), np.float32)
    q_emb = np.vstack([p[1] for p in parts]) if parts else np.zeros((0, dim), np.float32)
    last_emb = np.vstack([p[2] for p in parts]) if parts else np.zeros((0, dim), np.float32)
    standalone = np.stack([cheap_features(r.query, ()) for r in rows]) if rows else cheap
    return Featurised(cheap, q_emb, last_emb, standalone)


def fit_router(
    rows: Sequence[LabelledQuery], feats: Featurised, cfg: RouterTrainConfig, manifest: dict[str, Any]
) -> RouterWeights:
    """Fit both heads on ``rows`` (already featurised as ``feats``)."""
    from sklearn.linear_model import LogisticRegression

    if not rows:
        raise ValueError("no training rows")
    mean = feats.cheap.mean(axis=0)
    scale = feats.cheap.std(axis=0)
    scale[scale < 1e-6] = 1.0
    base = RouterWeights(
        mean=mean.astype(np.float32),
        scale=scale.astype(np.float32),
        embedding_scale=cfg.embedding_scale,
        type_head=LinearHead((), np.zeros((0, 0), np.float32), np.zeros(0, np.float32)),
        complexity_head=LinearHead((), np.zeros((0, 0), np.float32), np.zeros(0, np.float32)),
    )

    def fit(x: Vector, y: list[str], classes: Sequence[str]) -> LinearHead:
        missing = set(classes) - set(y)
        if missing:
            raise ValueError(f"training rows lack the classes {sorted(missing)}")
        model = LogisticRegression(
            C=cfg.c, class_weight="balanced", max_iter=cfg.max_iter, random_state=cfg.seed
        )
        model.fit(x, y)
        order = [list(model.classes_).index(c) for c in classes]
        return LinearHead(
            tuple(classes),
            model.coef_[order].astype(np.float32),
            model.intercept_[order].astype(np.float32),
        )

    type_head = fit(base.inputs(feats.cheap, feats.q_emb), [r.type.value for r in rows], list(QueryType))
    alone = [i for i, r in enumerate(rows) if r.type != QueryType.CONVERSATIONAL]
    cx_head = fit(
        base.inputs(feats.standalone_cheap[alone], feats.q_emb[alone]),
        [rows[i].complexity.value for i in alone],
        list(Complexity),
    )
    return RouterWeights(
        mean=base.mean,
        scale=base.scale,
        embedding_scale=cfg.embedding_scale,
        type_head=type_head,
        complexity_head=cx_head,
        manifest=manifest,
    )


def label_report(gold: Sequence[str], predicted: Sequence[str], classes: Sequence[str]) -> dict[str, Any]:
    """Accuracy, per-class precision/recall/F1/support and the confusion matrix (rows: gold)."""
    from sklearn.metrics import confusion_matrix, precision_recall_fscore_support

    labels = list(classes)
    p, r, f, s = precision_recall_fscore_support(gold, predicted, labels=labels, zero_division=0)
    matrix = confusion_matrix(gold, predicted, labels=labels)
    correct = sum(g == q for g, q in zip(gold, predicted, strict=True))
    return {
        "accuracy": round(correct / len(gold), 4) if gold else 0.0,
        "per_class": {
            c: {
                "precision": round(float(p[i]), 4),
                "recall": round(float(r[i]), 4),
                "f1": round(float(f[i]), 4),
                "support": int(s[i]),
            }
            for i, c in enumerate(labels)
        },
        "confusion": {g: {c: int(matrix[i][j]) for j, c in enumerate(labels)} for i, g in enumerate(labels)},
    }


def evaluate_router(
    router: QueryRouter, rows: Sequence[LabelledQuery], progress: Progress | None = None
) -> dict[str, Any]:
    """Route every row (batched) and compare with its labels; also by source/kind for the type."""
    routes = []
    for start in range(0, len(rows), BATCH):
        batch = rows[start : start + BATCH]
        routes += router.classify_many([r.query for r in batch], [r.history for r in batch])
        if progress:
            progress("route held-out", min(start + BATCH, len(rows)), len(rows))
    gold_t = [r.type.value for r in rows]
    pred_t = [x.type.value for x in routes]
    by_kind: dict[str, list[bool]] = {}
    for row, route in zip(rows, routes, strict=True):
        by_kind.setdefault(f"{row.source}/{row.kind}", []).append(row.type == route.type)
    return {
        "queries": len(rows),
        "type": label_report(gold_t, pred_t, list(QueryType)),
        "complexity": label_report(
            [r.complexity.value for r in rows], [x.complexity.value for x in routes], list(Complexity)
        ),
        "low_confidence_fallbacks": sum("min_confidence" in x.reason for x in routes),
        "type_accuracy_by_kind": {k: round(sum(v) / len(v), 4) for k, v in sorted(by_kind.items())},
    }


def measure_latency(router: QueryRouter, rows: Sequence[LabelledQuery], n: int = 200) -> dict[str, float]:
    """p50/p95 of ``classify`` on single queries (embedding included), after 5 warm-up calls."""
    sample = list(rows[:n])
    for r in sample[:5]:
        router.classify(r.query, r.history)
    times = []
    for r in sample:
        t0 = time.perf_counter()
        router.classify(r.query, r.history)
        times.append((time.perf_counter() - t0) * 1000)
    if not times:
        return {"latency_ms_p50": 0.0, "latency_ms_p95": 0.0, "latency_samples": 0}
    return {
        "latency_ms_p50": round(float(np.percentile(times, 50)), 2),
        "latency_ms_p95": round(float(np.percentile(times, 95)), 2),
        "latency_samples": len(times),
    }


def counts(rows: Sequence[LabelledQuery]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {"type": {}, "complexity": {}, "source": {}, "kind": {}}
    for r in rows:
        for key, value in (
            ("type", r.type.value),
            ("complexity", r.complexity.value),
            ("source", r.source),
            ("kind", r.kind),
        ):
            out[key][value] = out[key].get(value, 0) + 1
    return out


def base_manifest(model_id: str, embedder: Embedder, cfg: RouterTrainConfig, command: str) -> dict[str, Any]:
    return {
        "model_id": model_id,
        "embedder_id": embedder.model_id,
        "embedding_dim": embedder.dim,
        "created": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "config": asdict(cfg),
    }


def write_artifact(weights: RouterWeights, out_dir: Path, card: str) -> Path:
    weights.save(out_dir)
    (out_dir / "MODEL_CARD.md").write_text(card, encoding="utf-8")
    return out_dir


def train_router(
    data_dir: Path,
    embedder: Embedder,
    out_dir: Path,
    cfg: RouterTrainConfig,
    *,
    model_id: str,
    command: str,
    min_confidence: float,
    nq_limit: int | None = None,
    say: Callable[[str], None] = lambda _m: None,
    progress: Progress | None = None,
) -> Path:
    """Build the labelled queries, fit on the train part, measure on the held-out part, write the
    artifact (weights, manifest with counts and figures, model card) to ``out_dir``."""
    from services.models.router_card import render_router_card
    from services.models.router_data import load_labelled, split_rows

    rows = load_labelled(data_dir, seed=cfg.seed, nq_limit=nq_limit)
    train, heldout = split_rows(rows, "train"), split_rows(rows, "heldout")
    say(f"{len(train)} training and {len(heldout)} held-out queries from {data_dir}")
    feats = featurise(embedder, train, progress, name="embed train")
    manifest = base_manifest(model_id, embedder, cfg, command)
    manifest["counts"] = {"train": counts(train), "heldout": counts(heldout)}
    manifest["min_confidence"] = min_confidence
    weights = fit_router(train, feats, cfg, manifest)
    metrics: dict[str, Any] = {}
    if heldout:
        router = QueryRouter(weights, embedder, min_confidence=min_confidence)
        metrics = evaluate_router(router, heldout, progress)
        metrics |= measure_latency(router, heldout)
        say(
            f"held-out type accuracy {metrics['type']['accuracy']:.3f}, complexity "
            f"{metrics['complexity']['accuracy']:.3f}, classify p50 {metrics['latency_ms_p50']} ms"
        )
    manifest["heldout_metrics"] = metrics
    weights = RouterWeights(
        weights.mean,
        weights.scale,
        weights.embedding_scale,
        weights.type_head,
        weights.complexity_head,
        manifest,
    )
    return write_artifact(weights, out_dir, render_router_card({**manifest, **_spec(weights)}))


def _spec(weights: RouterWeights) -> dict[str, Any]:
    from services.orchestrator.routing.features import CHEAP_FEATURES

    return {"cheap_features": list(CHEAP_FEATURES), "embedding_scale": weights.embedding_scale}


def install_router(model_dir: Path, dest: Path) -> Path:
    """Copy a trained router to ``dest`` (the served location), manifest last."""
    import shutil

    from services.orchestrator.routing.router import CARD_FILE, MANIFEST_FILE, WEIGHTS_FILE

    RouterWeights.load(model_dir)  # refuses a broken folder before touching dest
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in (WEIGHTS_FILE, CARD_FILE, MANIFEST_FILE):
        if (model_dir / name).is_file():
            shutil.copyfile(model_dir / name, tmp / name)
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest
