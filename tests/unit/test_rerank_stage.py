"""The rerank stage's ordering, fusion, caching and degradation rules (a word-overlap scorer stands in
for the model here; the real model runs in the Reranker contract, tests/contracts/reranker.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.types import Chunk, ScoredChunk
from services.rerank.score_cache import ScoreCache
from services.rerank.stage import RerankStage, minmax


class OverlapReranker:
    """Scores by query-word overlap; counts calls so caching is observable."""

    model_id = "overlap@test"
    first_stage_weight: float | None = None

    def __init__(self) -> None:
        self.scored: list[str] = []

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        self.scored += list(passages)
        words = set(query.lower().split())
        return [float(len(words & set(p.lower().split()))) for p in passages]

    def check_ready(self) -> None:
        return None

    def close(self) -> None:
        return None


class FailingReranker(OverlapReranker):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        raise self.error


def hit(i: int, text: str, fused: float) -> ScoredChunk:
    chunk = Chunk(
        chunk_id=f"d{i}#0",
        doc_id=f"d{i}",
        tenant="t",
        ordinal=0,
        title=f"doc {i}",
        header="",
        text=text,
        source="test",
    )
    return ScoredChunk(chunk=chunk, scores={"bm25": fused, "dense": fused}, ranks={}, fused=fused)


HITS = [
    hit(0, "the weather in oslo today", 0.9),
    hit(1, "vpn setup guide for remote staff", 0.8),
    hit(2, "office lunch menu", 0.7),
    hit(3, "remote vpn access troubleshooting guide", 0.2),
]


def test_minmax_constant_list_is_all_ones() -> None:
    assert minmax([3.0, 3.0]) == [1.0, 1.0]
    assert minmax([1.0, 3.0, 2.0]) == [0.0, 1.0, 0.5]


def test_pure_mode_orders_by_reranker_and_keeps_tail() -> None:
    stage = RerankStage(OverlapReranker())
    result = stage.apply("remote vpn guide", HITS, depth=3, mode="pure", weight=0.5)
    assert [h.chunk.doc_id for h in result.hits] == ["d1", "d0", "d2", "d3"]  # d3 is below depth
    assert result.reranked == 3 and result.degraded == []
    assert result.hits[0].scores["rerank"] == 3.0
    assert "rerank" not in result.hits[3].scores


@pytest.mark.parametrize("mode", ["pure", "fused", "residual"])
def test_scores_decrease_down_the_list_across_the_depth_boundary(mode: str) -> None:
    """A client or an evaluation that sorts by score must see the stage's order: reranked scores (logits,
    or a blend in [0, 1]) and the first-stage scores below ``depth`` live on different scales, so the
    tail is shifted below the head, keeping its own order and gaps."""
    stage = RerankStage(OverlapReranker())
    tail_high = [*HITS, hit(4, "unrelated text", 0.15)]
    result = stage.apply("nothing matches", tail_high, depth=2, mode=mode, weight=0.5)  # type: ignore[arg-type]
    scores = [h.fused for h in result.hits]
    assert scores == sorted(scores, reverse=True)
    tail = result.hits[2:]
    assert tail[0].fused < min(scores[:2])
    assert [h.chunk.doc_id for h in tail] == ["d2", "d3", "d4"]
    assert tail[0].fused - tail[1].fused == pytest.approx(0.7 - 0.2)  # gaps kept
    assert tail[1].scores == {"bm25": 0.2, "dense": 0.2}  # per-retriever scores untouched


def test_fused_mode_blends_first_stage_score() -> None:
    stage = RerankStage(OverlapReranker())
    # d3 has the best overlap (3) but the worst first-stage score; weight decides.
    pure = stage.apply("remote vpn guide", HITS, depth=4, mode="fused", weight=1.0)
    assert pure.hits[0].chunk.doc_id in {"d1", "d3"}
    first = stage.apply("remote vpn guide", HITS, depth=4, mode="fused", weight=0.0)
    assert [h.chunk.doc_id for h in first.hits] == ["d0", "d1", "d2", "d3"]
    half = stage.apply("remote vpn guide", HITS, depth=4, mode="fused", weight=0.5)
    assert half.hits[0].chunk.doc_id == "d1"  # 0.5*1 + 0.5*(0.6/0.7) beats d3's 0.5*1 + 0
    assert all(0.0 <= h.fused <= 1.0 for h in half.hits)


def test_link_weight_lifts_a_page_linked_to_the_best_one() -> None:
    """d2 shares no word with the query, but the best page names its title ("doc 2"): with the lift on it
    rises to 0.8 of the best page's score, second; off (the default) it stays last of the head."""
    linked = [*HITS[:2], hit(2, "office lunch menu", 0.7), hit(3, "remote vpn access guide see doc 2", 0.2)]
    stage = RerankStage(OverlapReranker())
    off = stage.apply("remote vpn access guide", linked, depth=4, mode="pure", weight=0.5)
    assert [h.chunk.doc_id for h in off.hits] == ["d3", "d1", "d0", "d2"] and off.lifted == 0
    on = stage.apply("remote vpn access guide", linked, depth=4, mode="pure", weight=0.5, link_weight=0.8)
    assert [h.chunk.doc_id for h in on.hits] == ["d3", "d2", "d1", "d0"] and on.lifted == 1
    assert on.hits[1].fused == pytest.approx(0.8 * 4.0)  # from the head's lowest (0) toward d3's 4
    assert on.hits[1].scores["rerank"] == 0.0  # the raw logit is kept; only the order score rose


def test_cache_avoids_rescoring_same_pairs() -> None:
    model = OverlapReranker()
    stage = RerankStage(model, ScoreCache(100))
    stage.apply("remote vpn", HITS, depth=4, mode="pure", weight=0.5)
    assert len(model.scored) == 4
    again = stage.apply("remote vpn", HITS, depth=4, mode="pure", weight=0.5)
    assert len(model.scored) == 4 and again.cached == 4
    stage.apply("another query", HITS, depth=4, mode="pure", weight=0.5)
    assert len(model.scored) == 8


@pytest.mark.parametrize(
    "error",
    [
        RampartError(ErrorCode.UNAVAILABLE, "triton down"),
        RampartError(ErrorCode.DEADLINE_EXCEEDED, "too slow"),
        ConnectionResetError("socket closed mid-batch"),
    ],
)
def test_failures_degrade_to_fused_order(error: Exception) -> None:
    stage = RerankStage(FailingReranker(error))
    result = stage.apply("remote vpn", HITS, depth=4, mode="pure", weight=0.5)
    assert result.degraded == ["rerank"]
    assert [h.chunk.doc_id for h in result.hits] == ["d0", "d1", "d2", "d3"]
    assert result.reason and stage.degradations == 1


def test_bad_input_errors_are_not_swallowed() -> None:
    stage = RerankStage(FailingReranker(RampartError(ErrorCode.INVALID_ARGUMENT, "bad query")))
    with pytest.raises(RampartError) as info:
        stage.apply("q", HITS, depth=4, mode="pure", weight=0.5)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_no_reranker_or_no_hits_is_a_no_op() -> None:
    assert RerankStage(None).apply("q", HITS, depth=4, mode="pure", weight=0.5).hits == HITS
    assert RerankStage(OverlapReranker()).apply("q", [], depth=4, mode="pure", weight=0.5).hits == []


def test_residual_mode_adds_the_learned_first_stage_weight() -> None:
    model = OverlapReranker()
    model.first_stage_weight = 2.0
    stage = RerankStage(model)
    # logits (overlap with "remote vpn guide"): d0 0, d1 3, d2 0, d3 3; first stage minmax: 1, 6/7, 5/7, 0
    result = stage.apply("remote vpn guide", HITS, depth=4, mode="auto", weight=0.5)  # auto -> residual
    finals = {h.chunk.doc_id: h.fused for h in result.hits}
    assert finals["d1"] == pytest.approx(3 + 2 * 6 / 7)
    assert finals["d3"] == pytest.approx(3.0)
    assert finals["d0"] == pytest.approx(2.0)
    assert [h.chunk.doc_id for h in result.hits] == ["d1", "d3", "d0", "d2"]


def test_auto_without_a_learned_weight_is_the_fused_blend() -> None:
    stage = RerankStage(OverlapReranker())
    auto = stage.apply("remote vpn guide", HITS, depth=4, mode="auto", weight=0.5)
    fused = stage.apply("remote vpn guide", HITS, depth=4, mode="fused", weight=0.5)
    assert [h.fused for h in auto.hits] == [h.fused for h in fused.hits]
