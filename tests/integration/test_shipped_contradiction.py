"""The committed contradiction classifier: complete, small enough for the repository, installed by
``rampart models build``, and right on plain cases it was measured to get right (negation; support;
unrelated evidence). It is *not* asserted to catch swapped entities, antonyms or changed numbers: on
such probes it mostly does not (docs/factcheck.md)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from services.factcheck.config import FactCheckSettings
from services.factcheck.contradiction import (
    CONTRADICT,
    NEI,
    SUPPORT,
    ContradictionModel,
    build_contradiction_model,
)
from services.models.build import SHIPPED_CONTRADICTION
from services.models.reranker_export import is_complete, read_manifest

CLAIM = "Aspirin reduces stroke risk."


@pytest.fixture(scope="module")
def shipped() -> ContradictionModel:
    return ContradictionModel.from_dir(SHIPPED_CONTRADICTION)


def test_artifact_is_complete_int8_and_under_30_mb() -> None:
    assert is_complete(SHIPPED_CONTRADICTION)
    manifest = read_manifest(SHIPPED_CONTRADICTION)
    assert manifest is not None and set(manifest["variants"]) == {"int8"}
    assert manifest["labels"] == ["SUPPORT", "CONTRADICT", "NEI"]
    assert sum(f.stat().st_size for f in SHIPPED_CONTRADICTION.iterdir()) <= 30 * 1024 * 1024
    assert "rampart train contradiction" in (SHIPPED_CONTRADICTION / "MODEL_CARD.md").read_text()


def test_models_build_installs_it_where_settings_look(models_dir: Path) -> None:
    installed = models_dir / "contradiction"
    assert is_complete(installed)
    assert (read_manifest(installed) or {})["variants"] == (read_manifest(SHIPPED_CONTRADICTION) or {})[
        "variants"
    ]
    model = build_contradiction_model(FactCheckSettings(), models_dir)
    assert model is not None and model.model_id.startswith("rampart-minilm-l6-nli@")


def test_negated_evidence_contradicts_the_claim(shipped: ContradictionModel) -> None:
    probs = shipped.predict(
        [
            ("Aspirin did not reduce the risk of stroke in adults.", CLAIM),
            (
                "Statins did not lower mortality in elderly patients.",
                "Statins lower mortality in the elderly.",
            ),
        ]
    )
    assert (probs[:, CONTRADICT] > probs[:, SUPPORT]).all(), probs


def test_supporting_and_unrelated_evidence(shipped: ContradictionModel) -> None:
    probs = shipped.predict(
        [
            ("Aspirin reduced the risk of stroke by 30% in adults.", CLAIM),
            ("The cafeteria menu changes every Monday.", CLAIM),
        ]
    )
    assert probs[0].argmax() == SUPPORT and probs[0, SUPPORT] > probs[0, CONTRADICT]
    assert probs[1].argmax() == NEI
    assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
