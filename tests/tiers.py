"""Markers by folder: a test's tier is the folder it sits in, and a test in no tier folder is an error.

``make test`` selects tests by marker (``-m "unit or integration"``, then ``-m e2e``), so a test with
no marker would be collected and never run. Here the folder is the one place a tier is stated:
``tests/unit`` → ``unit``, ``tests/integration`` → ``integration``, ``tests/e2e`` → ``e2e``, ``tests/deploy`` →
``deploy`` (make test-deploy: images and the chart under podman). Collection
stops with a usage error naming every test that sits outside those folders, or that carries another
folder's tier marker by hand (which would run it in two tiers, or in the wrong one).

Loaded by ``tests/conftest.py``; a plugin of its own (``-p tests.tiers``) so that
``tests/unit/test_tiers.py`` can run it on a made-up tree. It imports nothing of the product.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

TIERS = ("unit", "integration", "e2e", "deploy")
TESTS = "tests"  # the folder under the rootdir (pyproject.toml's) that holds the tier folders


def tier_of(path: Path, rootdir: Path) -> str | None:
    """The tier folder a test file sits under (``tests/<tier>/…``), or ``None``."""
    try:
        parts = path.relative_to(rootdir).parts
    except ValueError:
        return None
    if len(parts) >= 3 and parts[0] == TESTS and parts[1] in TIERS:
        return parts[1]
    return None


def mark_by_folder(items: Sequence[pytest.Item], rootdir: Path) -> list[str]:
    """Give each item its folder's tier marker; return what is wrong, one line per bad item."""
    problems: list[str] = []
    for item in items:
        tier = tier_of(item.path, rootdir)
        if tier is None:
            problems.append(
                f"{item.nodeid}: not under {_folders()}, so no tier marker selects it; move its file "
                "into the folder of its tier"
            )
            continue
        stated = {m.name for m in item.iter_markers() if m.name in TIERS} - {tier}
        if stated:
            problems.append(
                f"{item.nodeid}: marked {', '.join(sorted(stated))} by hand but sits in {TESTS}/{tier}; "
                f"the folder sets the tier: drop the marker or move the test to {TESTS}/{sorted(stated)[0]}"
            )
            continue
        item.add_marker(getattr(pytest.mark, tier))
    return problems


def _folders() -> str:
    names = [f"{TESTS}/{t}" for t in TIERS]
    return ", ".join(names[:-1]) + " or " + names[-1]


@pytest.hookimpl(tryfirst=True)  # before -m deselects: a test without a tier must not slip out unseen
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problems = mark_by_folder(items, config.rootpath)
    if problems:
        raise pytest.UsageError(
            f"{len(problems)} test(s) are not in the folder of their tier (tests/README.md):\n  "
            + "\n  ".join(problems)
        )
