"""Unknown RAMPART_<GROUP>__<FIELD> variables are refused with the closest real name, not dropped."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from services.common.settings import RampartSettings
from services.common.settings_env import environment_problem, unknown_variables

pytestmark = pytest.mark.unit


def test_a_misspelt_nested_setting_is_refused_naming_the_real_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAMPART_RERANK__DEADLINE_MS", "15000")
    with pytest.raises(ValidationError) as err:
        RampartSettings()
    message = str(err.value)
    assert "RAMPART_RERANK__DEADLINE_MS (did you mean RAMPART_RERANK__TRITON__DEADLINE_MS?)" in message
    assert "docs/configuration.md" in message


def test_every_real_variable_and_other_tools_variables_pass() -> None:
    environ = {
        "RAMPART_RERANK__TRITON__DEADLINE_MS": "1",
        "RAMPART_INDEX__BM25_K1": "1",
        "rampart_fusion__method": "rrf",  # pydantic-settings matches names case-insensitively
        "RAMPART_DATA_DIR": "/x",
        "RAMPART_FACTCHECK": "{}",  # a whole group as JSON
        "RAMPART_CORPUS__TENANTS__ACME": "linked",  # a dict field's key
        "RAMPART_GRADING__WEIGHTS__BM25": "0.5",  # ... also when the dict is optional
        "RAMPART_URL": "http://x",  # the CLI's, not a setting: no delimiter, left alone
        "RAMPART_BENCH_QUERIES": "q.json",
        "OTHER__THING": "1",
    }
    assert unknown_variables(RampartSettings, environ) == []
    assert environment_problem(RampartSettings, environ) is None


def test_unknown_nested_names_are_all_listed() -> None:
    environ = {"RAMPART_FACTCHECK__COPY_BURST": "true", "RAMPART_NOPE__X": "1", "RAMPART_SERVE__PORT": "1"}
    assert unknown_variables(RampartSettings, environ) == ["RAMPART_FACTCHECK__COPY_BURST", "RAMPART_NOPE__X"]
    problem = environment_problem(RampartSettings, environ)
    assert problem is not None and "RAMPART_NOPE__X" in problem and "RAMPART_SERVE__PORT" not in problem


def test_every_documented_variable_is_known() -> None:
    """docs/configuration.md (generated from the models) and the check agree: no documented setting
    is refused."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    documented = {name: "1" for name in re.findall(r"`(RAMPART_[A-Z0-9_]+__[A-Z0-9_]+)`", doc)}
    assert len(documented) > 100
    assert unknown_variables(RampartSettings, documented) == []
