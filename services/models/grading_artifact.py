"""Writes the CRAG evaluator artifact: ``weights.json``, ``manifest.json`` and ``MODEL_CARD.md``.

``rampart tune grading --out DIR`` calls :func:`write_evaluator` with what it fitted; the shipped one is
``services/models/artifacts/grading`` (read by :mod:`services.orchestrator.corrective.evaluator`).
The manifest says what the values were fitted on and how (data, command, date) and what they scored
(figures); the card says the same for a reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from services.models.artifact_files import CARD_FILE, figure_table, manifest_fields
from services.orchestrator.corrective.evaluator import FEATURES, Evaluator

MODEL_ID = "rampart-crag-evaluator-lr"


def write_evaluator(
    out_dir: Path,
    evaluator: Evaluator,
    *,
    created: str,
    command: str,
    data: Mapping[str, Any],
    thresholds: Mapping[str, float],
    figures: Mapping[str, Mapping[str, Any]],
    extra: Mapping[str, Any] | None = None,
    model_id: str = MODEL_ID,
) -> Path:
    """Write the artifact to ``out_dir``. ``thresholds``: the ``correct`` / ``incorrect`` operating
    point chosen with these weights (``grading.*_threshold``); ``figures``: metric rows by name (the
    tuning command's table); ``extra``: anything else worth keeping (reranker, calibration)."""
    manifest = manifest_fields(
        model_id=model_id,
        created=created,
        command=command,
        data=data,
        figures=figures,
        extra={"thresholds": dict(thresholds), **dict(extra or {})},
    )
    evaluator.save(out_dir, manifest)
    (out_dir / CARD_FILE).write_text(model_card(manifest, evaluator), encoding="utf-8")
    return out_dir


def model_card(manifest: Mapping[str, Any], evaluator: Evaluator) -> str:
    data, thresholds = manifest["data"], manifest["thresholds"]
    lines = [
        f"# Model card: {manifest['model_id']}",
        "",
        f"Built {manifest['created']} by `{manifest['command']}`.",
        "",
        "## What it is",
        "CRAG's retrieval evaluator (`services/orchestrator/corrective/grading.py`, docs/grading.md): a",
        "logistic model over five features of the top `grading.depth` reranked hits, read as the chance",
        "that the set holds what the query asks. `grading.correct_threshold` and",
        "`grading.incorrect_threshold` cut its score into Correct / Ambiguous / Incorrect.",
        "",
        "## Data (dev data only)",
        *(f"- {name}: {_shown(value)}" for name, value in data.items()),
        *(
            f"- {name}: {_shown(manifest[name])}"
            for name in ("reranker", "calibration", "note")
            if name in manifest
        ),
        "",
        "## Weights",
        "| feature | weight |",
        "|---|---:|",
        *(f"| {f} | {evaluator.weights.get(f, 0.0)} |" for f in FEATURES),
        f"| (intercept) | {evaluator.bias} |",
        "",
        f"Operating point chosen with them: Correct at or above {thresholds['correct']}, Incorrect "
        f"below {thresholds['incorrect']}.",
        "",
        "## Figures",
        *figure_table(manifest["figures"]),
        "",
    ]
    return "\n".join(lines)


def _shown(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_shown(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(f"`{v}`" if isinstance(v, str) else str(v) for v in value)
    return str(value)
