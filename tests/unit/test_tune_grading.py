"""``rampart tune grading`` helpers: dev-only sets, the fit/report split, threshold choice."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.evaluation.grading_tune import answer_hit, half_of, parse_set, thresholds

pytestmark = pytest.mark.unit


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
