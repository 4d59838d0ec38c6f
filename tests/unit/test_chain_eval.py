"""all_supporting@k and recall@10 with hand-computed values, and the ``chain`` pipeline spec."""

from __future__ import annotations

import pytest

from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.evaluation.metrics import all_supporting, evaluate_run, evaluate_run_per_query
from services.evaluation.report import lower_is_better
from services.evaluation.runner import PipelineSpec

QRELS = {
    "q1": {"a": 1, "b": 1},  # two supporting documents
    "q2": {"c": 1, "d": 1},
    "q3": {"e": 1, "z": 0},  # z judged not relevant
    "q4": {"f": 1},  # never retrieved
}
RUN = {
    "q1": {"a": 0.9, "x": 0.8, "b": 0.7},  # a@1, b@3
    "q2": {"c": 0.9, "d": 0.8, "y": 0.1},  # both in the top 2
    "q3": {"z": 0.9, "e": 0.5},  # e@2
    "extra": {"a": 1.0},  # no qrels: ignored
}


def test_all_supporting_by_hand() -> None:
    assert all_supporting(QRELS, RUN, 1) == {"q1": 0.0, "q2": 0.0, "q3": 0.0, "q4": 0.0}
    assert all_supporting(QRELS, RUN, 2) == {"q1": 0.0, "q2": 1.0, "q3": 1.0, "q4": 0.0}
    assert all_supporting(QRELS, RUN, 3) == {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 0.0}


def test_all_supporting_breaks_ties_by_doc_id_descending() -> None:
    qrels = {"q": {"a": 1}}
    assert all_supporting(qrels, {"q": {"a": 0.5, "b": 0.5}}, 1) == {"q": 0.0}  # b before a
    assert all_supporting(qrels, {"q": {"a": 0.5, "0": 0.5}}, 1) == {"q": 1.0}
    with pytest.raises(RampartError, match="at least 1"):
        all_supporting(qrels, {}, 0)


def test_metrics_mix_ranx_and_all_supporting() -> None:
    per_query = evaluate_run_per_query(QRELS, RUN, ("recall@10", "all_supporting@2", "all_supporting@10"))
    assert per_query["all_supporting@2"] == {"q1": 0.0, "q2": 1.0, "q3": 1.0, "q4": 0.0}
    assert per_query["all_supporting@10"] == {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 0.0}
    assert per_query["recall@10"] == {"q1": 1.0, "q2": 1.0, "q3": 1.0, "q4": 0.0}
    mean = evaluate_run(QRELS, RUN, ("recall@2", "all_supporting@2"))
    assert mean["recall@2"] == pytest.approx((0.5 + 1.0 + 1.0 + 0.0) / 4)
    assert mean["all_supporting@2"] == pytest.approx(0.5)
    only = evaluate_run_per_query(QRELS, {}, ("all_supporting@5",))  # nothing retrieved at all
    assert only == {"all_supporting@5": dict.fromkeys(QRELS, 0.0)}
    with pytest.raises(RampartError, match="unknown metric"):
        evaluate_run(QRELS, RUN, ("all_supporting@0",))


def test_chain_spec_parsing() -> None:
    settings = RampartSettings()
    default = PipelineSpec.parse("chain", settings)
    assert default.chain_beams == settings.chain.beam_width and default.rerank == "fused"
    assert default.method.value == "minmax"
    two = PipelineSpec.parse("chain:2", settings)
    assert two.chain_beams == 2 and two.name == "chain:2"
    bm25 = PipelineSpec.parse("chain:1@bm25", settings)
    assert bm25.chain_beams == 1 and bm25.rerank is None and bm25.weights["dense"] == 0.0
    assert PipelineSpec.parse("hybrid-minmax+rerank-fused", settings).chain_beams is None
    for bad in ("chain:x", "chain:0", "chain:17", "chain:2@chain:1", "chain:2@nope"):
        with pytest.raises(RampartError):
            PipelineSpec.parse(bad, settings)


def test_calls_per_query_is_a_cost() -> None:
    assert lower_is_better("calls_per_query")
    assert not lower_is_better("all_supporting@2")
