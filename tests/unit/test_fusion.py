from __future__ import annotations

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.types import FusionMethod
from services.retrieval.fusion import Bounds, fuse


def scores(fused: list) -> dict[int, float]:
    return {f.key: round(f.score, 6) for f in fused}


def test_minmax_normalises_each_list_then_weights() -> None:
    lists = {"bm25": [(1, 10.0), (2, 5.0), (3, 0.0)], "dense": [(1, 0.2), (2, 0.6), (3, 0.4)]}
    out = fuse(lists, {"bm25": 0.5, "dense": 0.5})
    # bm25 -> 1, .5, 0 ; dense -> 0, 1, .5
    assert scores(out) == {1: 0.5, 2: 0.75, 3: 0.25}
    assert [f.key for f in out] == [2, 1, 3]


def test_minmax_bounds_are_fixed_not_observed() -> None:
    lists = {"dense": [(1, 0.5), (2, 0.25)]}
    out = fuse(lists, {"dense": 1.0}, bounds={"dense": Bounds(0.0, 1.0)})
    assert scores(out) == {1: 0.5, 2: 0.25}
    clipped = fuse({"dense": [(1, 2.0)]}, {"dense": 1.0}, bounds={"dense": Bounds(0.0, 1.0)})
    assert scores(clipped) == {1: 1.0}


def test_minmax_missing_item_gets_the_lists_floor() -> None:
    lists = {"bm25": [(1, 4.0), (2, 2.0)], "dense": [(3, 0.9), (1, 0.5)]}
    out = fuse(lists, {"bm25": 1.0, "dense": 1.0})
    s = scores(out)
    assert s[3] == 1.0  # dense 1.0 + bm25 floor 0
    assert s[2] == 0.0  # bm25 0 (it is bm25's worst) + dense floor 0
    assert s[1] == 1.0  # bm25 1 + dense 0


def test_zscore() -> None:
    out = fuse({"bm25": [(1, 3.0), (2, 1.0)]}, {"bm25": 1.0}, method=FusionMethod.ZSCORE)
    assert scores(out) == {1: 1.0, 2: -1.0}
    flat = fuse({"bm25": [(1, 3.0), (2, 3.0)]}, {"bm25": 1.0}, method=FusionMethod.ZSCORE)
    assert scores(flat) == {1: 0.0, 2: 0.0}


def test_rrf_uses_own_rank_lists_and_k() -> None:
    lists = {"bm25": [(1, 9.0), (2, 8.0), (3, 0.0)], "dense": [(2, 0.9), (3, 0.1), (1, 0.05)]}
    ranks = {"bm25": [1, 2], "dense": [2, 3]}  # 3 was filled in for bm25, 1 for dense
    out = fuse(lists, {"bm25": 1.0, "dense": 1.0}, method=FusionMethod.RRF, rrf_k=60, rank_lists=ranks)
    s = scores(out)
    assert s[2] == round(1 / 62 + 1 / 61, 6)
    assert s[1] == round(1 / 61, 6)  # no vote from dense: it did not retrieve 1
    assert s[3] == round(1 / 62, 6)
    assert out[0].key == 2


def test_zero_weight_retriever_is_ignored() -> None:
    out = fuse({"bm25": [(1, 1.0)], "dense": [(2, 1.0)]}, {"bm25": 1.0, "dense": 0.0})
    assert [f.key for f in out] == [1]


@pytest.mark.parametrize("weights", [{"bm25": 0.0, "dense": 0.0}, {"bm25": -1.0, "dense": 1.0}])
def test_bad_weights_are_rejected(weights: dict[str, float]) -> None:
    with pytest.raises(RampartError) as err:
        fuse({"bm25": [(1, 1.0)], "dense": [(1, 1.0)]}, weights)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT


def test_single_value_list_normalises_to_one_and_ties_are_deterministic() -> None:
    out = fuse({"bm25": [(5, 2.0), (4, 2.0)]}, {"bm25": 1.0})
    assert [f.key for f in out] == [4, 5]
    assert all(f.score == 1.0 for f in out)
