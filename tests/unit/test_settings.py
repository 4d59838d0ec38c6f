from __future__ import annotations

import ast
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from services.common.settings import RampartSettings
from services.common.settings_doc import render
from services.common.types import FusionMethod

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "configuration.md"


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


STAGE_CONFIGS = [
    "services.common.config",
    "services.retrieval.config",
    "services.retrieval.graph.config",
    "services.ingest.config",
    "services.rerank.config",
    "services.factcheck.config",
    "services.gateway.config",
    "services.learning.config",
    "services.stack.config",
    "services.orchestrator.config",
    "services.orchestrator.routing.config",
    "services.orchestrator.chain.config",
    "services.orchestrator.corrective.config",
    "services.orchestrator.conversation.config",
    "services.orchestrator.serving.config",
]


def _source(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    path = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    return path if path.is_file() else None


def _imports(module: str) -> set[str]:
    """The ``services`` modules ``module`` imports, at the top or inside functions."""
    path = _source(module)
    assert path is not None, module
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("services"):
            found.add(node.module)
            # ``from services.common import settings`` names a module too
            found |= {f"{node.module}.{a.name}" for a in node.names if _source(f"{node.module}.{a.name}")}
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("services")}
    return found


def test_stage_configs_do_not_import_the_composition() -> None:
    """Each stage's config module stands alone: the composition imports them, never the reverse
    (directly or through what they import)."""
    for start in STAGE_CONFIGS:
        seen, todo = set(), [start]
        while todo:
            module = todo.pop()
            if module not in seen:
                seen.add(module)
                todo += _imports(module)
        assert "services.common.settings" not in seen, f"{start} reaches services.common.settings"


def test_every_group_comes_from_a_stage_config() -> None:
    """``RampartSettings`` only composes: each group's model is defined in a stage's config module."""
    for name, field in RampartSettings.model_fields.items():
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            assert ann.__module__ in STAGE_CONFIGS, f"{name}: {ann.__module__}"
