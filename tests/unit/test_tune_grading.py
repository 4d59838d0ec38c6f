"""``rampart tune grading`` helpers: dev-only sets, the fit/report split, threshold choice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.evaluation.grading_tune import Case, answer_hit, half_of, parse_set, report, thresholds
from services.models.grading_artifact import write_evaluator
from services.orchestrator.corrective.config import GradingSettings
from services.orchestrator.corrective.evaluator import FEATURES, Evaluator


def test_test_splits_and_the_heldout_half_are_refused(tmp_path: Path) -> None:
    s = RampartSettings(data_dir=tmp_path)
    for spec in ("scifact::test", "hotpotqa_dev500::test::heldout", "scifact::train::heldout", "scifact"):
        with pytest.raises(RampartError):
            parse_set(spec, s)
    assert parse_set("hotpotqa_dev500::test::train", s)[1:] == ("test", "train")
    assert parse_set("@train-cache/nq::train", s)[0] == tmp_path / "train-cache" / "nq"


def test_fit_and_report_halves_are_stable_and_both_used() -> None:
    ids = [f"q{i}" for i in range(200)]
    halves = [half_of(q) for q in ids]
    assert halves == [half_of(q) for q in ids]
    assert 60 < halves.count("fit") < 140


def test_thresholds_reach_the_precision_asked() -> None:
    rng = np.random.default_rng(0)
    y = np.asarray([1] * 200 + [0] * 200)
    scores = np.clip(np.concatenate([rng.normal(0.8, 0.1, 200), rng.normal(0.3, 0.1, 200)]), 0, 1)
    correct, incorrect = thresholds(scores, y, 0.95)
    assert y[scores >= correct].mean() >= 0.95
    assert 1 - y[scores < incorrect].mean() >= 0.95
    assert incorrect <= correct
    # scores that do not separate the classes: no threshold reaches the precision, both stay at the edges
    flat = rng.uniform(0, 1, 400)
    assert thresholds(flat, y, 0.99) == (0.95, 0.05)


def test_answer_hit_ignores_case_and_spacing() -> None:
    assert answer_hit("The Chief of\n Protocol of the US", ["chief of protocol"])
    assert not answer_hit("Chief Protocol", ["Chief of Protocol", " "])


def test_the_written_artifact_reads_back_with_its_provenance(tmp_path: Path) -> None:
    fitted = Evaluator({"p_max": 3.5, "coverage": 1.25}, -2.0)
    write_evaluator(
        tmp_path,
        fitted,
        created="2026-01-01 00:00 UTC",
        command="rampart tune grading --out x",
        data={"sets": ["scifact::train"], "queries_per_set": 10},
        thresholds={"correct": 0.7, "incorrect": 0.4},
        figures={"report": {"auc": 0.9}},
    )
    back = Evaluator.load(tmp_path)
    assert (back.weights, back.bias) == (fitted.weights, fitted.bias)
    assert back.manifest["thresholds"] == {"correct": 0.7, "incorrect": 0.4}
    assert back.manifest["command"] == "rampart tune grading --out x"
    card = (tmp_path / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert "rampart tune grading --out x" in card and "| auc | 0.9 |" in card


def test_report_grades_with_the_evaluator_and_the_thresholds_given() -> None:
    def case(i: int, label: int) -> Case:
        return Case(f"q{i}", "d", "retrieved", label, dict.fromkeys(FEATURES, float(label)))

    cases = [case(i, i % 2) for i in range(20)]
    row = report(cases, Evaluator({"p_max": 10.0}, -5.0), GradingSettings())
    assert (
        row["auc"] == 1.0 and row["true_correct->correct"] == 1.0 and row["true_incorrect->incorrect"] == 1.0
    )
