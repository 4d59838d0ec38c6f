"""The attack evaluation's arithmetic: shares, recall with and without fact-check, detection scores,
and the Platt calibration fitted by ``rampart tune factcheck``."""

from __future__ import annotations

from pathlib import Path

from services.common.types import Chunk, ScoredChunk
from services.common.verdicts import Verdict
from services.evaluation.attack import AttackQuestion, Trace, attack_queries, detection_scores, summarize
from services.evaluation.beir import load_beir
from services.evaluation.factcheck_tune import Case, fit_calibration
from tests.unit.test_evaluation import make_beir

A, R = Verdict.ADVERSARIAL, Verdict.RELEVANT


def test_summarize_counts_queries_not_documents() -> None:
    traces = [
        Trace(
            True,
            {"d1": 1},
            topk=["poison-a-0", "d1"],
            reranked=["poison-a-0", "d1"],
            context=["d1"],
            judged=[("poison-a-0", A), ("d1", R)],
            factcheck_ms=10,
        ),
        Trace(
            True,
            {},
            topk=["poison-b-0"],
            reranked=["d2"],
            context=["d2"],
            judged=[("d2", R)],
            factcheck_ms=30,
        ),
        Trace(
            False,
            {"d3": 1, "d4": 1},
            topk=["d3", "d4"],
            reranked=["d3", "d4"],
            context=["d3"],
            judged=[("d3", R), ("d4", A)],
            factcheck_ms=20,
        ),
    ]
    f = summarize(traces, k=10, m=5)
    assert f["poison_in_topk"] == 1.0 and f["poison_in_reranked"] == 0.5 and f["poison_in_context"] == 0.0
    assert f["clean_recall@10_without_factcheck"] == 1.0 and f["clean_recall@10_with_factcheck"] == 0.5
    assert f["attacked_recall@10_with_factcheck"] == 1.0  # only attacked questions with qrels count
    assert f["added_latency_ms_p50"] == 20
    assert f["detection"]["adversarial"] == {"precision": 0.5, "recall": 1.0, "flagged_clean": 1}


def test_detection_scores_empty() -> None:
    assert detection_scores({})["corrupt"] == {"precision": 0.0, "recall": 0.0, "flagged_clean": 0}


def _case(logits: list[float], relevant: set[int]) -> Case:
    head = [
        ScoredChunk(
            chunk=Chunk(chunk_id=f"d{i}#0", doc_id=f"d{i}", tenant="t", ordinal=0, text="x"),
            scores={"rerank": v},
            fused=0.0,
        )
        for i, v in enumerate(logits)
    ]
    trace = Trace(False, {f"d{i}": 1 for i in relevant}, topk=[], reranked=[])
    return Case("q", trace, head, [])


def test_platt_calibration_orders_and_centres() -> None:
    cases = [_case([4.0, 3.0, -2.0, -3.0, 0.5, -0.5], {0, 1, 4}), _case([2.0, -4.0, 1.0, -1.0], {0, 2, 3})]
    a, _b = fit_calibration(cases, 10)
    assert a > 0  # higher logit, more likely relevant
    assert fit_calibration([_case([1.0, 2.0], set())], 10) == (1.0, 0.0)  # one class only: identity


def test_collected_cases_are_reused_only_under_the_same_key(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from services.common.settings import RampartSettings
    from services.evaluation.factcheck_tune import cases_key, load_cases, save_cases

    settings = RampartSettings()
    key = cases_key({"sets": ["a::b"], "clean_queries": 300, "k": 10}, settings)
    path = tmp_path / "cases.pkl"
    assert load_cases(path, key) is None  # nothing saved yet
    save_cases(path, key, [_case([1.0, -1.0], {0})])
    (case,) = load_cases(path, key) or []
    assert case.head[0].scores == {"rerank": 1.0} and case.trace.relevant == {"d0": 1}
    # another set, query count or setting is another key: collect afresh
    assert cases_key({"sets": ["a::c"], "clean_queries": 300, "k": 10}, settings) != key
    deeper = settings.model_copy(
        update={"factcheck": settings.factcheck.model_copy(update={"context_depth": 50})}
    )
    other = cases_key({"sets": ["a::b"], "clean_queries": 300, "k": 10}, deeper)
    assert other != key and load_cases(path, other) is None
    # a threshold the grid varies anyway does not change what was collected
    tighter = settings.model_copy(
        update={"factcheck": settings.factcheck.model_copy(update={"copy_threshold": 0.9})}
    )
    assert cases_key({"sets": ["a::b"], "clean_queries": 300, "k": 10}, tighter) == key


def test_grid_skips_slack_points_without_border_members() -> None:
    from services.evaluation.factcheck_tune import _redundant

    assert _redundant({"copy_border_threshold": 0.0, "copy_border_slack": 0.02})
    assert not _redundant({"copy_border_threshold": 0.0, "copy_border_slack": 1.0})
    assert not _redundant({"copy_border_threshold": 0.7, "copy_border_slack": 0.02})


def test_attacked_questions_find_their_judgements_by_id_or_by_text(tmp_path: Path) -> None:
    """PoisonedRAG's NQ ids ("test12") are not the corpus' query ids: the question's text finds them."""
    data = load_beir(make_beir(tmp_path / "set"), "test")  # q1 "what is alpha" -> d1, q2 -> d2
    attacks = [
        AttackQuestion("q2", "what is beta", "b", "x", ("planted",)),
        AttackQuestion("test12", "What is alpha?", "a", "x", ("planted",)),
        AttackQuestion("test13", "never judged", "c", "x", ("planted",)),
    ]
    queries = attack_queries(data, attacks)
    assert [(q.attacked, q.relevant) for q in queries] == [
        (True, {"d2": 2, "d3": 0}),
        (True, {"d1": 1}),
        (True, {}),
    ]
