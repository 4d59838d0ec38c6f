from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from services.common.settings import RampartSettings
from services.common.settings_doc import render
from services.common.types import FusionMethod

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_configuration_doc_is_current() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is stale: run `python -m services.common.settings_doc docs/configuration.md`"
    )


def test_env_overrides_nested(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAMPART_FUSION__METHOD", "rrf")
    monkeypatch.setenv("RAMPART_INDEX__BM25_K1", "0.9")
    s = RampartSettings()
    assert s.fusion.method is FusionMethod.RRF and s.index.bm25_k1 == 0.9


def test_bad_values_name_the_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAMPART_CHUNKING__MIN_WORDS", "500")
    with pytest.raises(ValidationError, match="min_words"):
        RampartSettings()
