"""CRAG's retrieval evaluator as a versioned artifact: a logistic model over the grading features.

The weights and intercept are fitted on dev data by ``rampart tune grading``, so they ship as a model
does (``services/models/artifacts/grading``: ``weights.json``, ``manifest.json`` with the data, command,
date and figures, and ``MODEL_CARD.md``), not as settings defaults. ``grading.evaluator_dir`` points at
another one; ``grading.weights`` / ``grading.bias``, when set, override its values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from services.common.errors import ErrorCode, RampartError, invalid
from services.orchestrator.corrective.config import GradingSettings

FEATURES = ("p_max", "p_mean", "coverage", "agreement", "dense_max")
FORMAT = "rampart-crag-evaluator-v1"
WEIGHTS_FILE = "weights.json"
MANIFEST_FILE = "manifest.json"
SHIPPED_EVALUATOR = Path(__file__).resolve().parents[2] / "models" / "artifacts" / "grading"


def logistic(values: Mapping[str, float], weights: Mapping[str, float], bias: float) -> float:
    """sigmoid(bias + Σ weight·feature); unknown weight names are a settings error."""
    unknown = set(weights) - set(FEATURES)
    if unknown:
        raise invalid(
            f"grading.weights names unknown feature(s) {sorted(unknown)}; use {', '.join(FEATURES)}"
        )
    z = bias + sum(w * values.get(name, 0.0) for name, w in weights.items())
    return 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z))))


@dataclass(frozen=True)
class Evaluator:
    """Weight per feature (a feature without one counts 0) and the intercept; ``manifest``: where
    they came from (empty for values given in settings)."""

    weights: dict[str, float]
    bias: float
    manifest: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        logistic({}, self.weights, self.bias)  # unknown feature names fail here, not on a query

    def score(self, values: Mapping[str, float]) -> float:
        return logistic(values, self.weights, self.bias)

    def save(self, out_dir: Path, manifest: Mapping[str, Any]) -> Path:
        """Write ``weights.json`` (what :meth:`load` reads) and ``manifest.json`` (``manifest`` plus
        the format and the values, so it reads on its own)."""
        out_dir.mkdir(parents=True, exist_ok=True)
        values = {"format": FORMAT, "features": list(FEATURES), "weights": self.weights, "bias": self.bias}
        (out_dir / WEIGHTS_FILE).write_text(json.dumps(values, indent=2) + "\n", encoding="utf-8")
        full = {**manifest, **values}
        (out_dir / MANIFEST_FILE).write_text(json.dumps(full, indent=2) + "\n", encoding="utf-8")
        return out_dir

    @classmethod
    def load(cls, model_dir: Path) -> Evaluator:
        """Read ``weights.json`` (and ``manifest.json`` beside it); a missing, foreign or corrupt
        file is an error naming the fix."""
        path = model_dir / WEIGHTS_FILE
        fix = (
            "run `rampart tune grading --out <dir>` and point RAMPART_GRADING__EVALUATOR_DIR at it, or "
            "unset it for the shipped evaluator"
        )
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
            weights = {str(k): float(v) for k, v in body["weights"].items()}
            bias = float(body["bias"])
            manifest_path = model_dir / MANIFEST_FILE
            manifest = (
                json.loads(manifest_path.read_text(encoding="utf-8")) if manifest_path.is_file() else {}
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"no readable CRAG evaluator at {path} ({exc}); {fix}",
                path=str(path),
            ) from exc
        if body.get("format") != FORMAT or list(body.get("features", [])) != list(FEATURES):
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"CRAG evaluator at {path} has format {body.get('format')!r} and features "
                f"{body.get('features')!r}; this release reads {FORMAT} with {list(FEATURES)}: {fix}",
                path=str(path),
            )
        if not all(math.isfinite(v) for v in (*weights.values(), bias)):
            raise RampartError(ErrorCode.FAILED_PRECONDITION, f"CRAG evaluator at {path} is corrupt; {fix}")
        try:
            return cls(weights, bias, manifest)
        except RampartError as exc:
            raise RampartError(ErrorCode.FAILED_PRECONDITION, f"{exc.message} (in {path}); {fix}") from exc


def build_evaluator(settings: GradingSettings) -> Evaluator:
    """The evaluator at ``grading.evaluator_dir`` (default: the shipped one), with ``grading.weights``
    and ``grading.bias`` replacing its values when set."""
    loaded = Evaluator.load(settings.evaluator_dir or SHIPPED_EVALUATOR)
    if settings.weights is None and settings.bias is None:
        return loaded
    return Evaluator(
        settings.weights if settings.weights is not None else loaded.weights,
        settings.bias if settings.bias is not None else loaded.bias,
    )
