"""The import layers: every arrow points down, from the edges (CLI, gateway, evaluation) through the
orchestrator to the stages, so a stage can be understood, tested and replaced without what uses it.

- the orchestrator builds responses from the public HTTP contract (``services.api``) and never
  imports the gateway, the CLI or the evaluation harness, which sit on top of it;
- the stages (retrieval, rerank, fact-check, ingest) import none of those nor the orchestrator;
- the HTTP contract imports no serving code: the gateway and the orchestrator both depend on it;
- ``services.common`` imports nothing above the stages;
- a settings model (``services/<stage>/config.py``) is a leaf every layer may import: the
  composition (``services/common/settings.py``) imports each stage's, and the API contract the
  bounds they hold. A config module itself imports only ``services.common`` and other config modules.

Checked on the source (the AST of every module, lazy imports inside functions included), so a
violation fails here before it becomes a cycle at run time.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

SERVICES = REPO / "services"
STAGES = ("retrieval", "rerank", "factcheck", "ingest", "learning")
ABOVE_STAGES = ("orchestrator", "gateway", "cli", "evaluation", "stack")
# package -> packages it must not import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "orchestrator": ("gateway", "cli", "evaluation"),
    **dict.fromkeys(STAGES, ("api", *ABOVE_STAGES)),
    "api": ABOVE_STAGES,
    "common": ("api", *ABOVE_STAGES),
}


def imported_packages(path: Path) -> set[tuple[str, int, str]]:
    """``(services.<package>, line, module)`` of every import of a Rampart package in the module at
    ``path``."""
    found: set[tuple[str, int, str]] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # ``from services import gateway`` names the package in the imported names
            names = (
                [f"{node.module}.{a.name}" for a in node.names]
                if node.module == "services"
                else [node.module]
            )
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "services" and len(parts) > 1:
                found.add((parts[1], node.lineno, name))
    return found


def violations(package: str, forbidden: tuple[str, ...]) -> list[str]:
    out = []
    for path in sorted((SERVICES / package).rglob("*.py")):
        for target, line, module in sorted(imported_packages(path)):
            if target in forbidden and module.split(".")[-1] != "config":
                out.append(f"{path.relative_to(REPO)}:{line} imports services.{target}")
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_point_down(package: str) -> None:
    assert (SERVICES / package).is_dir(), f"services/{package} is gone: update FORBIDDEN"
    found = violations(package, FORBIDDEN[package])
    assert not found, f"services/{package} must not import {', '.join(FORBIDDEN[package])}:\n" + "\n".join(
        found
    )


def test_config_modules_are_leaves() -> None:
    """What lets every layer import a stage's settings model without an arrow pointing up."""
    bad = []
    for path in sorted(SERVICES.rglob("config.py")):
        for target, line, module in sorted(imported_packages(path)):
            if target != "common" and module.split(".")[-1] != "config":
                bad.append(f"{path.relative_to(REPO)}:{line} imports {module}")
    assert not bad, "a config module may import only services.common and other config modules:\n" + "\n".join(
        bad
    )


def test_the_check_sees_lazy_and_package_imports(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "import services.gateway.app\n"
        "from services import cli\n"
        "def f():\n"
        "    from services.orchestrator.runtime import Runtime\n"
        "from services.common.types import Chunk\n"
    )
    assert {t for t, _, _ in imported_packages(module)} == {"gateway", "cli", "orchestrator", "common"}
