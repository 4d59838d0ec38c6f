"""The trained contradiction classifier on pairs of retrieved passages (rule 3 of the classifier),
with the shipped model: the odd passage out is outvoted, the reason names the model, and pairs are
capped at ``max_pairs``, most similar first."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.settings import RampartSettings
from services.common.verdicts import Verdict
from services.factcheck.checker import build_conflicts
from services.factcheck.classifier import decide
from services.factcheck.config import FactCheckSettings
from services.factcheck.contradiction import ContradictionModel
from services.factcheck.detectors import Signal
from services.factcheck.evidence import CheckInput, gather_evidence
from services.factcheck.model_conflicts import ModelConflicts, Side
from services.retrieval.embedder import Embedder

QUERY = "Does vitamin D supplementation reduce hip fractures in elderly women?"
AGREE = [
    "Vitamin D supplementation reduces the risk of hip fractures in elderly women.",
    "In elderly women, vitamin D supplementation reduces the risk of hip fractures.",
]
ODD = "Vitamin D supplementation does not reduce the risk of hip fractures in elderly women."


def no_alignment(a: str, b: str) -> Signal:
    """Claim alignment switched off, so what is observed is the model's doing alone."""
    return Signal.none()


@pytest.fixture(scope="module")
def model(models_dir: Path) -> ContradictionModel:
    return ContradictionModel.from_dir(RampartSettings(models_dir=models_dir).contradiction_model_dir())


def test_the_model_outvotes_the_odd_passage(model: ContradictionModel, embedder: Embedder) -> None:
    items = [
        CheckInput(chunk_id=f"{d}#0", doc_id=d, text=t, rerank_logit=3.0)
        for d, t in [("a", AGREE[0]), ("b", AGREE[1]), ("odd", ODD)]
    ]
    s = FactCheckSettings(contradiction_threshold=0.5, duplicate_threshold=1.0)
    evidence = gather_evidence(QUERY, items, embedder, s)
    plain = decide(QUERY, items, evidence, s, no_alignment)
    assert [j.verdict for j in plain] == [Verdict.RELEVANT] * 3
    judged = decide(
        QUERY, items, evidence, s, no_alignment, model_conflicts=ModelConflicts(model, max_pairs=12)
    )
    assert [j.verdict for j in judged] == [Verdict.RELEVANT, Verdict.RELEVANT, Verdict.COUNTERFACTUAL]
    assert "model: P(contradict)" in judged[2].reason and "contradicts 2 other" in judged[2].reason


def test_pairs_are_scored_both_ways_and_capped(model: ContradictionModel) -> None:
    conflicts = ModelConflicts(model, max_pairs=1)
    (sig,) = conflicts([(Side(AGREE[0], AGREE[0]), Side(ODD, ODD))])
    assert 0.0 <= sig.score <= 1.0 and sig.evidence.startswith("model: P(contradict)")
    assert conflicts([]) == []
    # the cap: with max_pairs=1 only the most similar of the three pairs reaches the model
    items = [
        CheckInput(chunk_id=f"{d}#0", doc_id=d, text=t, rerank_logit=3.0)
        for d, t in [("a", AGREE[0]), ("b", AGREE[1]), ("odd", ODD)]
    ]
    seen: list[int] = []

    class Counting(ModelConflicts):
        def __call__(self, pairs):  # type: ignore[no-untyped-def]
            seen.append(len(pairs))
            return super().__call__(pairs)

    s = FactCheckSettings(duplicate_threshold=1.0)
    evidence = gather_evidence(QUERY, items, None, s)
    decide(QUERY, items, evidence, s, no_alignment, model_conflicts=Counting(model, max_pairs=1))
    assert seen == [1]


def test_the_factory_loads_the_model_only_when_pairs_are_asked_for(models_dir: Path) -> None:
    assert build_conflicts(FactCheckSettings(), models_dir) is None  # default: 0 pairs
    conflicts = build_conflicts(FactCheckSettings(contradiction_pairs=6), models_dir)
    assert conflicts is not None and conflicts.max_pairs == 6 and conflicts.model_id
    off = FactCheckSettings(contradiction_pairs=6, use_contradiction_model=False)
    assert build_conflicts(off, models_dir) is None
