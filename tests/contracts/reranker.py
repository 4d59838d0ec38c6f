"""The ``Reranker`` contract (services/rerank/reranker.py): what the rerank stage may rely on from any
scorer, in-process or remote. Subclass :class:`RerankerContract` in the implementation's own test file
and provide ``impl`` (tests/README.md).

The scores are the shipped model's: an implementation serving other weights is not this contract's.
"""

from __future__ import annotations

import math

import pytest

from services.common.errors import ErrorCode, RampartError
from services.models.reranker_export import spearman
from services.rerank.reranker import Reranker

PASSAGES = [
    "Paris is the capital and most populous city of France.",
    "The mitochondrion is the powerhouse of the cell.",
    "France's capital, Paris, lies on the Seine.",
    "Basketball was invented by James Naismith in 1891.",
]


class RerankerContract:
    """Every ``Reranker`` keeps these promises: one finite logit per passage in input order, whatever
    the batch size (empty and very long passages included), the same scores whatever company a pair is
    sent in, ``INVALID_ARGUMENT`` naming what is wrong with bad input, ready once built.

    Provide ``impl``: the implementation under test, serving the shipped reranker.
    """

    @pytest.fixture()
    def impl(self) -> Reranker:
        raise NotImplementedError(
            f"{type(self).__name__} must provide the impl fixture: the reranker under test, serving the "
            "shipped model (tests/README.md)"
        )

    def test_ready_and_identified(self, impl: Reranker) -> None:
        impl.check_ready()
        assert isinstance(impl.model_id, str) and impl.model_id
        weight = impl.first_stage_weight
        assert weight is None or math.isfinite(weight)

    def test_scores_one_finite_logit_per_passage_in_order(self, impl: Reranker) -> None:
        scores = impl.score("what is the capital of france", PASSAGES)
        assert len(scores) == len(PASSAGES) and all(math.isfinite(s) for s in scores)
        # A trained model puts both Paris passages above the two unrelated ones.
        assert min(scores[0], scores[2]) > max(scores[1], scores[3])
        assert impl.score("what is the capital of france", list(reversed(PASSAGES))) == pytest.approx(
            list(reversed(scores)), abs=1e-4
        )

    def test_empty_inputs(self, impl: Reranker) -> None:
        assert impl.score("anything", []) == []
        (empty,) = impl.score("anything", [""])
        assert math.isfinite(empty)

    def test_long_and_odd_text_is_truncated_not_fatal(self, impl: Reranker) -> None:
        huge = "word " * 100_000
        odd = "\x00\x01 bin\udcff\ufffd ärger 日本語 " * 50
        scores = impl.score("long input", [huge, odd])
        assert len(scores) == 2 and all(math.isfinite(s) for s in scores)
        # what lies past the model's length is never read: the first few thousand characters score alike
        (head,) = impl.score("long input", [huge[:6000]])
        assert scores[0] == pytest.approx(head, abs=1e-4)

    def test_batch_larger_than_model_maximum_is_split(self, impl: Reranker) -> None:
        passages = [
            f"passage number {i} about topic {i % 7}, study {i}" for i in range(150)
        ]  # > max batch 64
        together = impl.score("topic 3", passages)
        alone = [impl.score("topic 3", [p])[0] for p in passages[:20]]
        assert len(together) == 150 and all(math.isfinite(s) for s in together)
        # Scored one pair per onnxruntime call (rerank.batch_size 1), int8 scores do not depend on the
        # company a pair is sent in, so splitting a large batch changes nothing.
        assert together[:20] == pytest.approx(alone, abs=1e-4)
        assert spearman(together[:20], alone) > 0.99

    @pytest.mark.parametrize(
        ("query", "passages", "match"),
        [("   ", ["x"], "non-empty"), ("q", "not a list", "list of strings"), ("q", [b"bytes"], "strings")],
    )
    def test_bad_input_is_a_clear_error(
        self, impl: Reranker, query: str, passages: object, match: str
    ) -> None:
        with pytest.raises(RampartError, match=match) as info:
            impl.score(query, passages)  # type: ignore[arg-type]
        assert info.value.code is ErrorCode.INVALID_ARGUMENT
