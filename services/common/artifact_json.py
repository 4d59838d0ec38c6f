"""Reads the payload of a fitted-values artifact (``policy.json``, ``plans.json``): a JSON object
stamped with its format, holding one table whose keys must be exactly the expected ones.

Shared by the settings models that default to a shipped artifact (``services/factcheck/config.py``,
``services/orchestrator/routing/config.py``), which must stay leaves: this module imports nothing of
Rampart's. Every failure is a ``ValueError`` naming the file, what is wrong and the fix, so a bad
``*_dir`` setting surfaces as a settings error at start-up, never as odd results later.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def read_table(
    path: Path, *, what: str, fmt: str, table: str, keys: Sequence[str], fix: str
) -> dict[str, Any]:
    """``raw[table]`` of the JSON object at ``path`` whose ``format`` is ``fmt`` and whose ``table``
    holds exactly ``keys``; ``what`` names the artifact in errors ("fact-check policy")."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{what} {path} does not exist; {fix}") from None
    except (OSError, ValueError) as exc:
        raise ValueError(f"{what} {path} is not readable JSON ({exc}); {fix}") from None
    if not isinstance(raw, dict) or raw.get("format") != fmt:
        found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
        raise ValueError(f"{what} {path}: format {found!r}, expected {fmt!r}; {fix}")
    values = raw.get(table)
    if not isinstance(values, dict) or set(values) != set(keys):
        got = set(values) if isinstance(values, dict) else set()
        raise ValueError(
            f"{what} {path}: {table!r} must hold exactly {list(keys)}; missing "
            f"{sorted(set(keys) - got)}, unknown {sorted(got - set(keys))}; {fix}"
        )
    return values
