"""`rampart tune routing`'s pure parts: the weight grid and the choice per level."""

from __future__ import annotations

import pytest

from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.evaluation.routing_tune import choose, weight_grid


def test_grid_sums_to_one_and_rejects_bad_steps() -> None:
    assert weight_grid(0.25) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert len(weight_grid(0.1)) == 11
    with pytest.raises(RampartError, match="divides 1"):
        weight_grid(0.3)


def test_choice_is_best_then_nearest_default_and_drops_the_kg() -> None:
    settings = RampartSettings()
    results = {
        "low": {0.0: 0.1, 0.4: 0.2, 0.5: 0.4, 0.7: 0.4, 1.0: 0.2},  # tie: 0.5 is nearest 0.45/(0.45+0.45)
        "medium": {0.0: 0.1, 0.3: 0.9, 1.0: 0.2},
        "high": {0.0: 0.0, 0.5: 0.0, 1.0: 0.0},
    }
    plans, chosen = choose(results, settings, {"low": 5, "medium": 5, "high": 0})
    assert chosen["low"]["bm25_weight"] == 0.5
    assert chosen["medium"]["bm25_weight"] == 0.3
    assert plans["high"]["bm25_weight"] == pytest.approx(0.5, abs=1e-4)  # no queries: default kept
    for plan in plans.values():
        assert plan["kg_weight"] == 0.0
        assert plan["bm25_weight"] + plan["dense_weight"] == pytest.approx(1.0)
    RampartSettings(routing={"plans": plans})  # a valid setting as printed
