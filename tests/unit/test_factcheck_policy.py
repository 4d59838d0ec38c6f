"""The fact-check's fitted values come from a versioned policy artifact (issue 33): the shipped one holds
exactly the literals the settings had, `rampart tune factcheck --out` writes one the settings read back,
explicit settings still win, and a bad file fails naming itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.common.settings import RampartSettings
from services.factcheck.config import (
    FITTED,
    POLICY_FILE,
    SHIPPED_POLICY_DIR,
    FactCheckSettings,
    load_policy,
)
from services.models.factcheck_policy import write_policy

# The literals of services/factcheck/config.py before issue 33 (commit 5dd7e7b): the move changes nothing.
BEFORE = {
    "calibration": (0.9991, -2.4084),
    "duplicate_threshold": 0.84,
    "duplicate_min_docs": 5,
    "context_depth": 30,
    "copy_threshold": 0.8,
    "copy_min_docs": 2,
    "copy_border_threshold": 0.0,
    "copy_border_slack": 1.0,
    "claim_join_threshold": 0.55,
    "claim_share": 0.5,
    "conflict_threshold": 0.8,
    "coverage_threshold": 0.34,
    "relevance_threshold": 0.02,
}


def _write(out: Path, **changes: object) -> Path:
    return write_policy(
        out,
        {**BEFORE, **changes},
        created="2026-11-27",
        command="rampart tune factcheck --set a::b --out x",
        data={"sets": ["a::b"]},
        figures={"chosen point (dev)": {"poison_in_context": 0.2}},
    )


def test_the_shipped_policy_holds_the_old_defaults() -> None:
    settings = FactCheckSettings()
    assert set(BEFORE) == set(FITTED)
    for name, value in BEFORE.items():
        got = getattr(settings, name)
        assert got == value and type(got) is type(value), name
    assert RampartSettings().factcheck.calibration == (0.9991, -2.4084)
    manifest = json.loads((SHIPPED_POLICY_DIR / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["model_id"] == "rampart-factcheck-policy"
    assert manifest["values"] == json.loads((SHIPPED_POLICY_DIR / POLICY_FILE).read_text())["values"]
    assert (SHIPPED_POLICY_DIR / "MODEL_CARD.md").is_file()


def test_a_written_policy_is_read_and_explicit_settings_win(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = _write(tmp_path / "policy", duplicate_threshold=0.9, calibration=(1.1, -2.0), copy_min_docs=3)
    assert {p.name for p in out.iterdir()} == {"policy.json", "manifest.json", "MODEL_CARD.md"}
    assert "| `factcheck.duplicate_threshold` | 0.9 |" in (out / "MODEL_CARD.md").read_text()

    monkeypatch.setenv("RAMPART_FACTCHECK__POLICY_DIR", str(out))
    monkeypatch.setenv("RAMPART_FACTCHECK__COPY_MIN_DOCS", "4")
    settings = RampartSettings().factcheck
    assert settings.duplicate_threshold == 0.9
    assert settings.calibration == (1.1, -2.0)
    assert settings.copy_min_docs == 4  # the environment wins over the policy
    assert settings.claim_share == 0.5
    direct = FactCheckSettings(policy_dir=out, relevance_threshold=0.1)
    assert (direct.duplicate_threshold, direct.relevance_threshold) == (0.9, 0.1)


def test_a_bad_policy_fails_naming_the_file_and_the_value(tmp_path: Path) -> None:
    out = _write(tmp_path / "policy")
    policy = json.loads((out / POLICY_FILE).read_text())
    policy["values"]["duplicate_threshold"] = 1.5
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / POLICY_FILE).write_text(json.dumps(policy))
    with pytest.raises(ValidationError, match=r"bad/policy\.json: duplicate_threshold=1\.5 .*tune factcheck"):
        FactCheckSettings(policy_dir=bad)

    del policy["values"]["claim_share"]
    (bad / POLICY_FILE).write_text(json.dumps(policy))
    load_policy.cache_clear()
    with pytest.raises(ValidationError, match=r"bad/policy\.json: .*missing \['claim_share'\]"):
        FactCheckSettings(policy_dir=bad)

    with pytest.raises(ValidationError, match=r"nowhere/policy\.json does not exist"):
        FactCheckSettings(policy_dir=tmp_path / "nowhere")
    with pytest.raises(ValueError, match="holds exactly"):
        write_policy(tmp_path / "x", {"calibration": (1.0, 0.0)}, created="", command="", data={}, figures={})


def test_the_tuner_saves_its_chosen_point(tmp_path: Path) -> None:
    from services.evaluation.factcheck_tune import GRID, FactCheckTune, save_policy

    best = {n: v for n, v in BEFORE.items() if n in GRID}
    rows = [
        {**best, "duplicate_threshold": 0.9, "poison_in_context": 0.3},
        {**best, "poison_in_context": 0.2},
    ]
    tuned = FactCheckTune([], (1.2, -2.5), best, rows, {"sets": ["a::b"], "cases": 0})
    out = save_policy(tuned, tmp_path / "p", command="rampart tune factcheck --out p")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["figures"] == {"chosen point (dev)": {"poison_in_context": 0.2}}
    assert manifest["data"]["sets"] == ["a::b"] and manifest["grid_points"] == 2
    assert FactCheckSettings(policy_dir=out).calibration == (1.2, -2.5)
