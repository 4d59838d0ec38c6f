"""The route plans come from a versioned artifact (issue 33): the shipped one holds exactly the table the
settings had, `rampart tune routing --out` writes one the settings read back, explicit plans still
win, and a bad file fails naming itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.common.settings import RampartSettings
from services.models.routing_plans import write_plans
from services.orchestrator.routing.config import (
    PLANS_FILE,
    SHIPPED_PLANS_DIR,
    RoutePlan,
    RoutingSettings,
    read_plans,
)

# The literals of services/orchestrator/routing/config.py before issue 33 (commit 5dd7e7b, _hypa_plans):
# the move changes nothing.
BEFORE = {
    "low": RoutePlan(context_k=3, bm25_weight=0.5, dense_weight=0.4, kg_weight=0.1, kg_depth=1),
    "medium": RoutePlan(
        context_k=5, bm25_weight=0.4, dense_weight=0.4, kg_weight=0.2, kg_depth=2, chain_steps=2
    ),
    "high": RoutePlan(context_k=10, bm25_weight=0.7, dense_weight=0.3, kg_weight=0.0, kg_depth=3),
}
# Issue 34 (2026-11-27) gave BM25 and dense equal shares in every row (HyPA's KG shares kept): 0.7 for
# the high row was fitted on HotpotQA alone and cost single-hop rows of other kinds, HyPA's low row cost
# NQ-oracle's routed path (the routing artifact's card).
SHIPPED = {
    **BEFORE,
    "low": RoutePlan(context_k=3, bm25_weight=0.45, dense_weight=0.45, kg_weight=0.1, kg_depth=1),
    "high": RoutePlan(context_k=10, bm25_weight=0.5, dense_weight=0.5, kg_weight=0.0, kg_depth=3),
}


def _dumped(plans: dict[str, RoutePlan]) -> dict[str, dict[str, object]]:
    return {level: plan.model_dump() for level, plan in plans.items()}


def _write(out: Path, **changes: RoutePlan) -> Path:
    return write_plans(
        out,
        {**BEFORE, **changes},
        created="2026-11-27",
        command="rampart tune routing --out x",
        data={"metric": "ndcg@10"},
        figures={"chosen ndcg@10 (dev)": {"high": 0.8}},
    )


def test_the_shipped_plans_are_the_old_defaults_with_even_splits() -> None:
    plans = RoutingSettings().plans
    assert list(plans) == ["low", "medium", "high"]
    for level, before in SHIPPED.items():
        for name, value in before.model_dump().items():
            got = getattr(plans[level], name)
            assert got == value and type(got) is type(value), (level, name)
    assert _dumped(RampartSettings().routing.plans) == _dumped(SHIPPED)
    assert RoutingSettings().plans["high"] is not RoutingSettings().plans["high"]  # no shared plan
    manifest = json.loads((SHIPPED_PLANS_DIR / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["model_id"] == "rampart-route-plans"
    assert manifest["plans"] == json.loads((SHIPPED_PLANS_DIR / PLANS_FILE).read_text())["plans"]
    assert (SHIPPED_PLANS_DIR / "MODEL_CARD.md").is_file()


def test_written_plans_are_read_and_explicit_plans_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    high = RoutePlan(context_k=10, bm25_weight=0.6, dense_weight=0.4, kg_depth=3)
    out = _write(tmp_path / "plans", high=high)
    assert {p.name for p in out.iterdir()} == {"plans.json", "manifest.json", "MODEL_CARD.md"}
    assert "| high | 10 | 300 | 0.6 | 0.4 | 0.0 | 3 | unset |" in (out / "MODEL_CARD.md").read_text()

    monkeypatch.setenv("RAMPART_ROUTING__PLANS_DIR", str(out))
    plans = RampartSettings().routing.plans
    assert (plans["high"].bm25_weight, plans["medium"].chain_steps) == (0.6, 2)
    explicit = {level: plan.model_dump() for level, plan in BEFORE.items()}
    monkeypatch.setenv("RAMPART_ROUTING__PLANS", json.dumps(explicit))
    assert RampartSettings().routing.plans["high"].bm25_weight == 0.7  # the environment wins
    direct = RoutingSettings(plans_dir=out, plans=BEFORE)
    assert direct.plans["high"].bm25_weight == 0.7
    assert RoutingSettings(plans_dir=out).plans["high"].bm25_weight == 0.6


def test_bad_plans_fail_naming_the_file_and_the_value(tmp_path: Path) -> None:
    out = _write(tmp_path / "plans")
    raw = json.loads((out / PLANS_FILE).read_text())
    bad = tmp_path / "bad"
    bad.mkdir()
    raw["plans"]["high"]["context_k"] = 0
    (bad / PLANS_FILE).write_text(json.dumps(raw))
    with pytest.raises(ValidationError, match=r"bad/plans\.json: high: context_k is invalid .*tune routing"):
        RoutingSettings(plans_dir=bad)

    raw["plans"]["high"]["context_k"] = 10
    raw["plans"]["high"]["bm25_weight"] = 0.9
    (bad / PLANS_FILE).write_text(json.dumps(raw))
    read_plans.cache_clear()
    with pytest.raises(ValidationError, match=r"bad/plans\.json: high: .*sum to 1\.200"):
        RoutingSettings(plans_dir=bad)

    del raw["plans"]["low"]
    (bad / PLANS_FILE).write_text(json.dumps(raw))
    read_plans.cache_clear()
    with pytest.raises(ValidationError, match=r"bad/plans\.json: .*missing \['low'\]"):
        RoutingSettings(plans_dir=bad)

    with pytest.raises(ValidationError, match=r"nowhere/plans\.json does not exist"):
        RoutingSettings(plans_dir=tmp_path / "nowhere")
    with pytest.raises(ValueError, match="hold exactly"):
        write_plans(tmp_path / "x", {"low": BEFORE["low"]}, created="", command="", data={}, figures={})


def test_the_tuner_saves_its_choice(tmp_path: Path) -> None:
    from services.evaluation.routing_tune import RoutingTune, save_plans

    plans = _dumped(BEFORE)
    plans["low"] = {**plans["low"], "bm25_weight": 0.6, "dense_weight": 0.4, "kg_weight": 0.0}
    chosen = {
        lvl: {"bm25_weight": 0.5, "dense_weight": 0.5, "score": 0.8, "score_near_current": 0.79}
        for lvl in plans
    }
    tuned = RoutingTune(
        {lvl: {0.5: 0.8} for lvl in plans},
        {"low": 3, "medium": 1, "high": 2},
        plans,
        chosen,
        {"metric": "ndcg@10"},
    )
    out = save_plans(tuned, tmp_path / "p", command="rampart tune routing --out p")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["figures"]["chosen ndcg@10 (dev)"] == {"low": 0.8, "medium": 0.8, "high": 0.8}
    assert manifest["grid"]["high"] == {"0.5": 0.8}
    assert RoutingSettings(plans_dir=out).plans["low"].bm25_weight == 0.6
