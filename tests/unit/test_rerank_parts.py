"""Pair batching, query splits, training-group sampling: the small pure parts of the rerank work."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.evaluation.runner import PipelineSpec
from services.evaluation.splits import query_split_of, select_queries
from services.models.reranker_data import MinedGroup
from services.models.reranker_export import spearman
from services.models.reranker_train import epoch_order, sample_group, split_groups
from services.rerank.pair_scorer import length_batches, side_by_side


@given(
    st.lists(st.integers(min_value=1, max_value=512), max_size=200), st.integers(min_value=1, max_value=64)
)
def test_length_batches_partition_and_respect_caps(lengths: list[int], batch: int) -> None:
    batches = length_batches(lengths, batch, max_tokens=1024)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(len(lengths)))
    for b in batches:
        assert 1 <= len(b) <= batch
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 1024


def test_length_batches_rejects_zero_batch() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        length_batches([3], 0)


def test_query_split_is_stable_and_about_half() -> None:
    ids = [f"q{i}" for i in range(2000)]
    held = select_queries(ids, "heldout")
    train = select_queries(ids, "train")
    assert set(held).isdisjoint(train) and len(held) + len(train) == len(ids)
    assert 0.45 < len(held) / len(ids) < 0.55
    assert all(query_split_of(q) == "heldout" for q in held)
    assert select_queries(ids, "all") == ids


def group(i: int, source: str = "scifact") -> MinedGroup:
    return MinedGroup(
        source=source,
        qid=f"q{i}",
        query=f"query {i}",
        positives=[f"pos {i}"],
        hybrid_negatives=[f"h{i}-{j}" for j in range(5)],
        hac_negatives=[f"a{i}-{j}" for j in range(3)],
    )


def test_sample_group_mixes_hybrid_and_hac_negatives_with_their_priors() -> None:
    g = group(1)
    g.positive_priors = [0.9]
    g.hybrid_priors = [0.5 + j / 100 for j in range(5)]
    g.hac_priors = [0.1] * 3
    items = sample_group(g, 3, random.Random(0))
    texts = [t for t, _ in items]
    assert items[0] == ("pos 1", 0.9) and len(items) == 4
    assert sum(t.startswith("h") for t in texts[1:]) == 2
    assert sum(t.startswith("a") for t in texts[1:]) == 1
    for t, p in items[1:]:
        assert p == (0.5 + int(t[-1]) / 100 if t.startswith("h") else 0.1)


def test_sample_group_tops_up_when_a_pool_is_short_and_defaults_priors() -> None:
    g = MinedGroup("nq", "q", "query", ["p"], hybrid_negatives=["h0"], hac_negatives=[])
    items = sample_group(g, 3, random.Random(0))
    assert items == [("p", 0.0), ("h0", 0.0), ("h0", 0.0), ("h0", 0.0)]


def test_split_and_epoch_order_are_deterministic() -> None:
    groups = [group(i, "scifact" if i % 2 else "nq") for i in range(400)]
    a_train, a_val = split_groups(groups, 0.1)
    _, b_val = split_groups(groups, 0.1)
    assert [g.qid for g in a_val] == [g.qid for g in b_val] and 10 < len(a_val) < 80
    order = epoch_order(a_train, {"scifact": 2, "nq": 1}, random.Random(5))
    assert order == epoch_order(a_train, {"scifact": 2, "nq": 1}, random.Random(5))
    counts = {i: order.count(i) for i in set(order)}
    assert all(counts[i] == (2 if a_train[i].source == "scifact" else 1) for i in counts)


def test_spearman_of_orderings() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)


def test_pipeline_specs_with_rerank() -> None:
    s = RampartSettings()
    spec = PipelineSpec.parse("hybrid-minmax:0.3+rerank-fused", s)
    assert spec.rerank == "fused" and spec.weights == {"bm25": 0.3, "dense": 0.7}
    assert PipelineSpec.parse("bm25+rerank", s).rerank == "pure"
    assert PipelineSpec.parse("hybrid-rrf", s).rerank is None
    with pytest.raises(RampartError, match=r"\+rerank"):
        PipelineSpec.parse("bm25+magic", s)


@pytest.mark.parametrize(
    ("threads", "parallel", "cores", "calls"),
    [
        (1, 0, 2, 2),  # the default: one single-thread call per core
        (1, 0, 8, 8),
        (2, 0, 8, 4),
        (3, 0, 2, 1),  # more threads per call than cores: still one call
        (0, 0, 8, 1),  # all cores in one call
        (0, 3, 8, 3),  # explicit
        (1, 5, 2, 5),
    ],
)
def test_side_by_side_calls(threads: int, parallel: int, cores: int, calls: int) -> None:
    assert side_by_side(threads, parallel, cores) == calls
