"""Fitting the CRAG evaluator (weights, bias) and its two thresholds on dev data (``rampart tune grading``),
and measuring knowledge refinement per lexical weight (``rampart tune refinement``).

Cases come from dev queries searched the way the gateway searches (hybrid → rerank, no fact-check):

- *as retrieved*: the top ``depth`` hits; Correct when a judged-relevant document is in the top ``k``;
- *relevant removed*: the same ranked list with every judged-relevant document taken out, so the top
  ``depth`` is what retrieval would give if the corpus lacked the answer — Incorrect by construction
  (made only when something was removed).

Queries are split in two by a salted hash of the query id: the logistic model and the thresholds are
fitted on one half and reported on the other. Sets are dev data only: HotpotQA-500's ``train`` half,
SciFact's ``train`` qrels, NQ-oracle's ``train`` qrels; a ``test`` qrels split is refused unless
limited to the ``train`` query half.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from services.common.errors import invalid
from services.common.settings import RampartSettings
from services.evaluation.beir import load_beir, resolve_dataset
from services.evaluation.runner import EVAL_PRINCIPAL, Progress, eval_runtime
from services.evaluation.splits import QuerySplit, select_queries
from services.models.grading_artifact import write_evaluator
from services.orchestrator.corrective.config import GradingSettings
from services.orchestrator.corrective.evaluator import FEATURES, Evaluator, build_evaluator
from services.orchestrator.corrective.grading import features
from services.orchestrator.runtime import Variant
from services.rerank.reranker import build_reranker
from services.retrieval.embedder import build_embedder

DEFAULT_SETS = ["hotpotqa_dev500::test::train", "scifact::train", "@train-cache/nq_open_oracle::train"]


@dataclass(frozen=True)
class Case:
    qid: str
    dataset: str
    kind: str  # "retrieved" or "removed"
    label: int  # 1 = Correct
    features: dict[str, float]


def parse_set(spec: str, settings: RampartSettings) -> tuple[Path, str, str]:
    """``PATH_OR_NAME::QRELS_SPLIT[::train|heldout]`` (``@x`` = ``<data_dir>/x``)."""
    parts = spec.split("::")
    if len(parts) not in (2, 3):
        raise invalid(f"--set {spec!r}: write CORPUS::QRELS_SPLIT or CORPUS::QRELS_SPLIT::train")
    half = parts[2] if len(parts) == 3 else "all"
    if half not in ("all", "train", "heldout"):
        raise invalid(f"--set {spec!r}: the query half must be train or heldout")
    if parts[1] == "test" and half != "train":
        raise invalid(f"--set {spec!r}: tuning on a test split is not allowed; add ::train (its train half)")
    if half == "heldout":
        raise invalid(f"--set {spec!r}: the heldout half is for reporting only; use ::train")
    raw = parts[0]
    path = settings.data_dir / raw[1:] if raw.startswith("@") else Path(raw)
    return resolve_dataset(path, settings), parts[1], half


def half_of(qid: str) -> str:
    """``fit`` or ``report``: a salted hash, independent of the dataset splits' own hash."""
    return "fit" if int(hashlib.sha256(f"grading:{qid}".encode()).hexdigest()[:8], 16) % 2 else "report"


def matrix(cases: list[Case]) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray([[c.features[f] for f in FEATURES] for c in cases], dtype=np.float64)
    y = np.asarray([c.label for c in cases], dtype=np.int64)
    return x, y


def fit(cases: list[Case]) -> tuple[dict[str, float], float]:
    """Logistic regression (L2, class-balanced) over FEATURES; returns (weights, bias)."""
    from sklearn.linear_model import LogisticRegression

    x, y = matrix(cases)
    if len(set(y.tolist())) < 2:
        raise invalid("the dev cases have one label only; add a set with queries retrieval gets right")
    model = LogisticRegression(C=10.0, class_weight="balanced", max_iter=1000).fit(x, y)
    weights = {f: round(float(w), 4) for f, w in zip(FEATURES, model.coef_[0], strict=True)}
    return weights, round(float(model.intercept_[0]), 4)


def thresholds(scores: np.ndarray, y: np.ndarray, precision: float) -> tuple[float, float]:
    """Lowest score at and above which ≥ ``precision`` of the cases are Correct, and the highest below
    which ≥ ``precision`` are not (clamped so that incorrect ≤ correct)."""
    grid = np.round(np.arange(0.05, 0.96, 0.01), 2)
    correct = next(
        (float(t) for t in grid if (scores >= t).sum() >= 10 and y[scores >= t].mean() >= precision), 0.95
    )
    incorrect = next(
        (float(t) for t in grid[::-1] if (scores < t).sum() >= 10 and 1 - y[scores < t].mean() >= precision),
        0.05,
    )
    return correct, min(incorrect, correct)


def report(cases: list[Case], evaluator: Evaluator, g: GradingSettings) -> dict[str, Any]:
    """AUC, and per true label the share graded Correct / Ambiguous / Incorrect (``g``'s thresholds)."""
    from sklearn.metrics import roc_auc_score

    from services.orchestrator.corrective.grading import grade_of

    _, y = matrix(cases)
    scores = np.asarray([evaluator.score(c.features) for c in cases])
    grades = [grade_of(float(s), g).value for s in scores]
    row: dict[str, Any] = {"cases": len(cases), "auc": round(float(roc_auc_score(y, scores)), 4)}
    for label, name in ((1, "correct"), (0, "incorrect")):
        mine = [gr for gr, lab in zip(grades, y.tolist(), strict=True) if lab == label]
        row[f"true_{name}"] = len(mine)
        for gr in ("correct", "ambiguous", "incorrect"):
            row[f"true_{name}->{gr}"] = round(mine.count(gr) / len(mine), 3) if mine else 0.0
    return row


def collect(
    settings: RampartSettings, specs: list[str], queries: int, k: int, *, progress: Progress | None = None
) -> tuple[list[Case], str]:
    """The cases of ``queries`` judged queries per set (``PATH_OR_NAME::QRELS_SPLIT[::train]``), searched
    by the runtime as the gateway searches (hybrid → rerank, unchecked), and the id of the reranker
    whose scores they hold."""
    embedder = build_embedder(settings.embedding, settings.models_dir)
    reranker = build_reranker(settings.rerank, settings.models_dir)  # one for every set
    if reranker is None:
        raise invalid("tuning the evaluator needs the reranker; run `rampart models build`")
    searched = Variant(factcheck=False, rerank_cache=50_000)  # as the gateway searches, unchecked
    g = settings.grading
    calibration = settings.factcheck.calibration
    cases: list[Case] = []
    try:
        for spec in specs:
            root, split, half = parse_set(spec, settings)
            dataset = load_beir(root, split)
            keep = set(select_queries(list(dataset.queries), half))  # type: ignore[arg-type]
            judged = [q for q in dataset.queries if q in keep and any(dataset.qrels.get(q, {}).values())]
            judged.sort(key=lambda q: hashlib.sha256(q.encode()).hexdigest())  # spread, not file order
            chosen = judged[:queries]
            with eval_runtime(
                dataset,
                settings,
                settings.data_dir / "eval-cache",
                embedder=embedder,
                reranker=reranker,
                variant=searched,
            ) as (runtime, _):
                pipeline = runtime.search
                params = pipeline.params(top_k=max(settings.rerank.depth, 30))
                for i, qid in enumerate(chosen, start=1):
                    query = dataset.queries[qid]
                    hits = pipeline.search(query, EVAL_PRINCIPAL, params).hits
                    relevant = {d for d, grade in dataset.qrels[qid].items() if grade > 0}
                    label = int(any(h.chunk.doc_id in relevant for h in hits[:k]))
                    f = features(query, hits, calibration, g.depth)
                    cases.append(Case(qid, dataset.name, "retrieved", label, f))
                    rest = [h for h in hits if h.chunk.doc_id not in relevant]
                    if len(rest) < len(hits):
                        f = features(query, rest, calibration, g.depth)
                        cases.append(Case(qid, dataset.name, "removed", 0, f))
                    if progress and (i % 10 == 0 or i == len(chosen)):
                        progress(dataset.name, i, len(chosen))
    finally:
        reranker.close()
    return cases, reranker.model_id


@dataclass(frozen=True)
class GradingFit:
    """What ``rampart tune grading`` reports: the cases, the fitted values, and the report rows (the
    fit half, the report half tuned and with the current settings, and the report half per set)."""

    cases: list[Case]
    chosen: dict[str, Any]
    rows: dict[str, dict[str, Any]]
    evaluator: Evaluator
    reranker_id: str
    fit_cases: int
    report_cases: int


def tune_grading(
    settings: RampartSettings,
    specs: list[str],
    *,
    queries: int,
    k: int,
    precision: float,
    progress: Progress | None = None,
) -> GradingFit:
    """Collect the cases, fit the evaluator and its thresholds on the ``fit`` half, report on the other."""
    cases, reranker_id = collect(settings, specs, queries, k, progress=progress)
    fit_cases = [c for c in cases if half_of(c.qid) == "fit"]
    held = [c for c in cases if half_of(c.qid) == "report"]
    weights, bias = fit(fit_cases)
    evaluator = Evaluator(weights, bias)
    x_scores = np.asarray([evaluator.score(c.features) for c in fit_cases])
    correct, incorrect = thresholds(x_scores, matrix(fit_cases)[1], precision)
    chosen: dict[str, Any] = {
        "weights": weights,
        "bias": bias,
        "correct_threshold": correct,
        "incorrect_threshold": incorrect,
    }
    tuned = settings.grading.model_copy(
        update={"correct_threshold": correct, "incorrect_threshold": incorrect}
    )
    current = build_evaluator(settings.grading)
    rows = {
        "fit": report(fit_cases, evaluator, tuned),
        "report": report(held, evaluator, tuned),
        "report, current settings": report(held, current, settings.grading),
    }
    for name in sorted({c.dataset for c in cases}):
        rows[f"report {name}"] = report([c for c in held if c.dataset == name], evaluator, tuned)
    return GradingFit(cases, chosen, rows, evaluator, reranker_id, len(fit_cases), len(held))


def save_evaluator(
    tuned: GradingFit,
    out_dir: Path,
    settings: RampartSettings,
    *,
    sets: list[str],
    queries: int,
    k: int,
    precision: float,
    command: str,
) -> Path:
    """Write the fitted evaluator as an artifact (:mod:`services.models.grading_artifact`) with what it
    was fitted on (the sets, the cases of each half, the command), its thresholds and its figures."""
    return write_evaluator(
        out_dir,
        tuned.evaluator,
        created=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command=command,
        data={
            "sets": sets,
            "queries_per_set": queries,
            "correct_when": f"a judged-relevant document in the top {k}",
            "precision": precision,
            "cases": {"all": len(tuned.cases), "fit": tuned.fit_cases, "report": tuned.report_cases},
        },
        thresholds={
            "correct": tuned.chosen["correct_threshold"],
            "incorrect": tuned.chosen["incorrect_threshold"],
        },
        figures=tuned.rows,
        extra={"reranker": tuned.reranker_id, "calibration": list(settings.factcheck.calibration)},
    )


def answer_hit(text: str, answers: list[str]) -> bool:
    """A gold answer string appears in ``text`` (case- and white-space-insensitive)."""
    low = " ".join(text.lower().split())
    return any(" ".join(a.lower().split()) in low for a in answers if a.strip())


def refinement_rows(
    settings: RampartSettings,
    *,
    queries: int,
    query_half: QuerySplit,
    depth: int,
    lexical_weights: list[float],
    progress: Progress | None = None,
) -> tuple[int, dict[str, dict[str, float]]]:
    """``(questions, rows)``: on HotpotQA-500's ``query_half``, the answer-string recall and mean
    characters of the top ``depth`` results (searched as served, unchecked), then of their refined
    strips per ``grading.lexical_weight`` in ``lexical_weights``."""
    from services.orchestrator.corrective.refine import KnowledgeRefiner

    root = resolve_dataset(Path("hotpotqa_dev500"), settings)
    answers_path = root.parent / "answers.jsonl"
    if not answers_path.exists():
        raise invalid(f"{answers_path} is missing; point RAMPART_EVAL_DATA_DIR at the shared data")
    answers = {
        row["_id"]: row["answers"]
        for row in (
            json.loads(line) for line in answers_path.read_text(encoding="utf-8").splitlines() if line
        )
    }
    dataset = load_beir(root, "test")
    half = select_queries(list(dataset.queries), query_half)
    chosen = [q for q in half if answers.get(q)][:queries]
    embedder = build_embedder(settings.embedding, settings.models_dir)
    base = {"recall": 0, "chars": 0}
    per = {w: {"recall": 0, "chars": 0, "strips": 0} for w in lexical_weights}
    with eval_runtime(
        dataset,
        settings,
        settings.data_dir / "eval-cache",
        embedder=embedder,
        variant=Variant(factcheck=False, rerank_cache=0),
    ) as (runtime, _):
        pipeline = runtime.search
        params = pipeline.params(top_k=depth)
        refiners = {
            w: KnowledgeRefiner(embedder, settings.grading.model_copy(update={"lexical_weight": w}))
            for w in lexical_weights
        }
        for i, qid in enumerate(chosen, start=1):
            query, gold = dataset.queries[qid], answers[qid]
            hits = pipeline.search(query, EVAL_PRINCIPAL, params).hits
            full = "\n".join(h.chunk.text for h in hits)
            base["recall"] += answer_hit(full, gold)
            base["chars"] += len(full)
            for w, refiner in refiners.items():
                refined = refiner.refine(query, hits)
                text = " ".join(s.text for s in refined.strips)
                per[w]["recall"] += answer_hit(text, gold)
                per[w]["chars"] += len(text)
                per[w]["strips"] += len(refined.strips)
            if progress and (i % 10 == 0 or i == len(chosen)):
                progress("refine", i, len(chosen))
    n = len(chosen)
    rows = {f"top {depth} results": {"answer_recall": base["recall"] / n, "chars": base["chars"] / n}}
    for w, v in per.items():
        rows[f"refined, lexical_weight={w:g}"] = {
            "answer_recall": v["recall"] / n,
            "chars": v["chars"] / n,
            "strips": v["strips"] / n,
        }
    return n, rows
