"""What every fitted-values artifact shares (``services/models/artifacts/{grading,factcheck,routing}``):
its manifest's common fields, the three files written together, and the card's figure table.

The tuning commands (``rampart tune grading|factcheck|routing --out DIR``) each write one; keeping
the layout in one place is what lets a reader (and the loaders) expect the same files in each.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

CARD_FILE = "MODEL_CARD.md"
MANIFEST_FILE = "manifest.json"


def manifest_fields(
    *,
    model_id: str,
    created: str,
    command: str,
    data: Mapping[str, Any],
    figures: Mapping[str, Mapping[str, Any]],
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The fields every manifest opens with: what, when, by which command, on what data; then any
    ``extra`` and the figures it scored (the tuning command's table, rows by name)."""
    return {
        "model_id": model_id,
        "created": created,
        "command": command,
        "data": dict(data),
        **dict(extra or {}),
        "figures": {name: dict(row) for name, row in figures.items()},
    }


def write_artifact(
    out_dir: Path, payload_file: str, payload: Mapping[str, Any], manifest: Mapping[str, Any], card: str
) -> Path:
    """Write the payload the loader reads (``payload_file``), the manifest (the payload repeated, so
    it reads on its own) and the card, into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / payload_file).write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    (out_dir / MANIFEST_FILE).write_text(
        json.dumps({**manifest, **payload}, indent=2) + "\n", encoding="utf-8"
    )
    (out_dir / CARD_FILE).write_text(card, encoding="utf-8")
    return out_dir


def figure_table(figures: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """A markdown table of the figures: one column per row name, one line per metric."""
    if not figures:
        return ["(none recorded)"]
    metrics = list(dict.fromkeys(m for row in figures.values() for m in row))
    rows = [f"| metric | {' | '.join(figures)} |", "|---|" + "---:|" * len(figures)]
    for m in metrics:
        rows.append(f"| {m} | " + " | ".join(str(row.get(m, "")) for row in figures.values()) + " |")
    return rows


def shown(value: Any) -> str:
    """A manifest value as a card shows it: mappings as ``k: v; …``, sequences comma-separated
    (strings in backticks), ``None`` as "unset"."""
    if isinstance(value, Mapping):
        return "; ".join(f"{k}: {shown(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(f"`{v}`" if isinstance(v, str) else str(v) for v in value)
    return "unset" if value is None else str(value)
