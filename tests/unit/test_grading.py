"""CRAG evaluator features and thresholds, strip location and scoring, query rewrite, source config."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from pydantic import SecretStr, ValidationError

from services.common.errors import RampartError
from services.common.types import Chunk, ScoredChunk
from services.factcheck.config import FactCheckSettings
from services.orchestrator.corrective.config import GradingSettings, SecondarySourceSettings
from services.orchestrator.corrective.evaluator import (
    FEATURES,
    SHIPPED_EVALUATOR,
    Evaluator,
    build_evaluator,
    logistic,
)
from services.orchestrator.corrective.grading import RetrievalGrader, features, grade_of
from services.orchestrator.corrective.refine import RefinedContext, Strip, locate, strip_scores
from services.orchestrator.corrective.retrieval import _merge
from services.orchestrator.corrective.rewrite_query import parse_rewrite, rule_rewrite
from services.orchestrator.corrective.secondary import HttpSource, SharedOnlyPrincipal
from services.orchestrator.plan import Grade
from services.retrieval.hybrid import SearchOutcome

CAL = (1.0, 0.0)  # P(relevant) = sigmoid(logit)


def hit(
    cid: str,
    text: str,
    *,
    rerank: float | None = None,
    dense: float | None = 0.5,
    ranks: tuple[int | None, int | None] = (1, 1),
    title: str = "",
) -> ScoredChunk:
    scores: dict[str, float | None] = {"bm25": 3.0, "dense": dense}
    if rerank is not None:
        scores["rerank"] = rerank
    return ScoredChunk(
        chunk=Chunk(chunk_id=cid, doc_id=cid.split("#")[0], tenant="t", ordinal=0, title=title, text=text),
        scores=scores,
        ranks={"bm25": ranks[0], "dense": ranks[1]},
        fused=1.0,
    )


def test_features_of_a_reranked_set() -> None:
    hits = [
        hit("a#0", "The Eiffel Tower is in Paris.", rerank=2.0, dense=0.8, ranks=(1, 2)),
        hit("b#0", "Bananas are yellow.", rerank=-2.0, dense=0.2, ranks=(40, None)),
    ]
    f = features("Where is the Eiffel Tower?", hits, CAL, depth=5)
    p_hi, p_lo = 1 / (1 + math.exp(-2.0)), 1 / (1 + math.exp(2.0))
    assert f["p_max"] == pytest.approx(p_hi)
    assert f["p_mean"] == pytest.approx((p_hi + p_lo) / 2)
    assert f["coverage"] == pytest.approx(1.0)  # "eiffel" and "tower" both in the first strip
    assert f["agreement"] == pytest.approx(0.5)  # only the first is in both retrievers' top 10
    assert f["dense_max"] == pytest.approx(0.8)
    assert f["reranked"] == 1.0


def test_features_read_only_the_top_depth() -> None:
    hits = [hit("a#0", "nothing here", rerank=-5.0), hit("b#0", "Eiffel Tower", rerank=5.0)]
    assert features("Eiffel Tower", hits, CAL, depth=1)["p_max"] < 0.01


def test_without_rerank_scores_the_cosine_stands_in() -> None:
    f = features("q words", [hit("a#0", "q words", dense=0.6)], CAL, depth=5)
    assert f["reranked"] == 0.0 and f["p_max"] == pytest.approx(0.6)


def test_an_empty_set_has_zero_features_and_grades_incorrect() -> None:
    f = features("anything", [], CAL, depth=5)
    assert set(FEATURES) <= set(f) and not any(f.values())
    grader = RetrievalGrader(GradingSettings(), FactCheckSettings())
    assert grader.grade("anything", SearchOutcome([], {}, {})).grade is Grade.INCORRECT


def test_grade_thresholds_are_inclusive_at_correct_and_exclusive_at_incorrect() -> None:
    s = GradingSettings(correct_threshold=0.7, incorrect_threshold=0.5)
    assert grade_of(0.7, s) is Grade.CORRECT
    assert grade_of(0.69, s) is Grade.AMBIGUOUS
    assert grade_of(0.5, s) is Grade.AMBIGUOUS
    assert grade_of(0.49, s) is Grade.INCORRECT


def test_grader_separates_a_good_set_from_a_bad_one() -> None:
    grader = RetrievalGrader(GradingSettings(), FactCheckSettings(calibration=CAL))
    good = [hit("a#0", "The Eiffel Tower stands in Paris.", rerank=6.0, dense=0.8)]
    bad = [hit("b#0", "Bananas ripen in warm rooms.", rerank=-6.0, dense=0.1, ranks=(50, None))]
    q = "Where does the Eiffel Tower stand?"
    g_good, g_bad = grader.grade(q, SearchOutcome(good, {}, {})), grader.grade(q, SearchOutcome(bad, {}, {}))
    assert g_good.score > g_bad.score
    assert g_good.grade is Grade.CORRECT and g_bad.grade is Grade.INCORRECT
    assert 0.0 <= g_bad.score <= g_good.score <= 1.0


def test_unknown_weight_names_fail_at_start() -> None:
    with pytest.raises(RampartError, match="unknown feature"):
        RetrievalGrader(GradingSettings(weights={"p_maxx": 1.0}), FactCheckSettings())
    assert logistic({"p_max": 1.0}, {"p_max": 1000.0}, 0.0) == pytest.approx(1.0)


# The weights and intercept `rampart tune grading` fitted, shipped as settings defaults until they
# became an artifact: the artifact must hold exactly these.
FITTED_WEIGHTS = {
    "p_max": 7.2681,
    "p_mean": -1.7951,
    "coverage": 2.3686,
    "agreement": 0.2625,
    "dense_max": -1.8906,
}
FITTED_BIAS = -3.5398


def test_the_shipped_evaluator_holds_the_fitted_values_bit_for_bit() -> None:
    shipped = Evaluator.load(SHIPPED_EVALUATOR)
    assert shipped.weights == FITTED_WEIGHTS and list(shipped.weights) == list(FEATURES)
    assert shipped.bias == FITTED_BIAS
    grader = RetrievalGrader(GradingSettings(), FactCheckSettings())
    assert grader.evaluator.weights == FITTED_WEIGHTS and grader.evaluator.bias == FITTED_BIAS
    # the settings' thresholds are the operating point chosen with these weights
    default = GradingSettings()
    thresholds = shipped.manifest["thresholds"]
    assert (default.correct_threshold, default.incorrect_threshold) == (
        thresholds["correct"],
        thresholds["incorrect"],
    )
    assert {"command", "created", "data", "figures"} <= set(shipped.manifest)
    assert "rampart tune grading" in (SHIPPED_EVALUATOR / "MODEL_CARD.md").read_text(encoding="utf-8")


def test_settings_override_the_artifact(tmp_path: Path) -> None:
    mine = Evaluator({"p_max": 2.0}, -1.0).save(tmp_path / "mine", {"model_id": "mine"})
    loaded = build_evaluator(GradingSettings(evaluator_dir=mine))
    assert (loaded.weights, loaded.bias, loaded.manifest["model_id"]) == ({"p_max": 2.0}, -1.0, "mine")
    only_bias = build_evaluator(GradingSettings(bias=0.5))
    assert (only_bias.weights, only_bias.bias) == (FITTED_WEIGHTS, 0.5)
    only_weights = build_evaluator(GradingSettings(weights={"coverage": 1.0}))
    assert (only_weights.weights, only_weights.bias) == ({"coverage": 1.0}, FITTED_BIAS)


def test_a_missing_or_foreign_evaluator_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(RampartError, match="EVALUATOR_DIR") as err:
        build_evaluator(GradingSettings(evaluator_dir=tmp_path / "none"))
    assert "rampart tune grading --out" in err.value.message
    (tmp_path / "weights.json").write_text(
        json.dumps({"format": "other", "features": list(FEATURES), "weights": {}, "bias": 0.0}),
        encoding="utf-8",
    )
    with pytest.raises(RampartError, match="rampart-crag-evaluator-v1"):
        build_evaluator(GradingSettings(evaluator_dir=tmp_path))
    body = {
        "format": "rampart-crag-evaluator-v1",
        "features": list(FEATURES),
        "weights": {"p_maxx": 1.0},
        "bias": 0,
    }
    (tmp_path / "weights.json").write_text(json.dumps(body), encoding="utf-8")
    with pytest.raises(RampartError, match="unknown feature"):
        build_evaluator(GradingSettings(evaluator_dir=tmp_path))


def test_thresholds_in_the_wrong_order_are_rejected() -> None:
    with pytest.raises(ValidationError, match="incorrect_threshold"):
        GradingSettings(correct_threshold=0.4, incorrect_threshold=0.6)


def test_locate_finds_sentences_across_line_breaks() -> None:
    text = "First line\nwraps here.  Second   sentence!\n\nThird."
    pieces = ["First line wraps here.", "Second sentence!", "Third."]
    spans = locate(text, pieces)
    assert [" ".join(text[a:b].split()) for a, b in spans] == pieces
    assert spans[0][0] == 0 and spans[2][1] == len(text)


def test_strip_scores_blend_coverage_and_cosine() -> None:
    got = strip_scores(
        "eiffel tower height", "Eiffel Tower", ["It is 330 metres tall.", "height 330"], [0.5, 0.0], 0.5
    )
    # title terms count for every strip: 2/3 coverage; the second strip adds "height": 3/3
    assert got[0] == pytest.approx(0.5 * 2 / 3 + 0.5 * 0.5)
    assert got[1] == pytest.approx(0.5 * 1.0)


def test_refined_context_groups_strips_and_cites_them() -> None:
    strips = [
        Strip("d1", "d1#0", 0, 5, "One.", 0.9, 0),
        Strip("d1", "d1#0", 10, 15, "Two.", 0.5, 0),
        Strip("d2", "d2#0", 0, 6, "Three.", 0.7, 1, origin="tenant:pub"),
    ]
    ctx = RefinedContext(strips)
    assert ctx.text == "[1] One. Two.\n[2] Three."
    assert ctx.citations()[2] == {
        "doc_id": "d2",
        "chunk_id": "d2#0",
        "start": 0,
        "end": 6,
        "origin": "tenant:pub",
    }


def test_rule_rewrite_keeps_entities_and_drops_scaffolding() -> None:
    got = rule_rewrite("Can you please tell me what year the Eiffel Tower was completed?")
    assert got == "year Eiffel Tower completed"
    assert rule_rewrite("what is it?") == "what is it?"  # nothing salient: the query as it was


def test_parse_rewrite_is_strict() -> None:
    assert parse_rewrite('Sure! ```{"query": "Eiffel Tower height"}```') == "Eiffel Tower height"
    assert parse_rewrite('{"query": 5}') is None
    assert parse_rewrite('{"q": "x"}') is None
    assert parse_rewrite("no json") is None
    assert parse_rewrite('{"query": "' + "x" * 400 + '"}') is None


def test_service_principal_carries_only_the_everyone_token() -> None:
    p = SharedOnlyPrincipal(tenant="pub", user="rampart-secondary", groups=["admins"])
    assert p.acl_tokens() == ["g:*"]


def test_http_source_rejects_bad_urls_without_echoing_credentials() -> None:
    for url in (None, "ftp://x/search", "http://user:s3cret@host/search"):
        with pytest.raises(RampartError) as err:
            HttpSource(SecondarySourceSettings(kind="http", url=url, api_key=SecretStr("Zq9-bearer")))
        assert "s3cret" not in err.value.message and "Zq9" not in err.value.message


def test_merge_keeps_primary_first_and_each_chunk_once() -> None:
    a, b, c = hit("a#0", "x"), hit("b#0", "y"), hit("c#0", "z")
    hits, origins = _merge([a, b], [b, c], "http:x")
    assert [h.chunk.chunk_id for h in hits] == ["a#0", "b#0", "c#0"]
    assert origins == ["primary", "primary", "http:x"]


def test_a_tenant_source_needs_a_valid_tenant_name() -> None:
    from services.orchestrator.corrective.secondary import TenantSource, build_secondary

    with pytest.raises(RampartError, match="RAMPART_GRADING__SECONDARY__TENANT"):
        build_secondary(SecondarySourceSettings(kind="tenant"), None)  # type: ignore[arg-type]
    with pytest.raises(RampartError, match="not a tenant name"):
        TenantSource(None, "bad tenant!")  # type: ignore[arg-type]
    assert build_secondary(SecondarySourceSettings(), None) is None  # type: ignore[arg-type]


def test_select_keeps_each_passages_best_and_opening_strip_then_fills() -> None:
    from services.orchestrator.corrective.refine import select

    # (passage rank, text, start, end): passage 0 has 3 strips, passage 1 has 2
    rows = [
        (0, "a" * 10, 0, 10),
        (0, "b" * 10, 11, 21),
        (0, "c" * 10, 22, 32),
        (1, "d" * 10, 0, 10),
        (1, "e" * 10, 11, 21),
    ]
    scores = [0.1, 0.9, 0.5, 0.05, 0.3]
    g = GradingSettings(strips=4, min_strip_score=0.2, strip_chars=1000)
    assert select(rows, scores, g) == [1, 0, 4, 3]  # best + opening of each passage; 4 reached: no fill
    g = GradingSettings(strips=5, min_strip_score=0.2, strip_chars=1000)
    assert select(rows, scores, g) == [1, 0, 4, 3, 2]  # one more, by score
    g = GradingSettings(strips=5, min_strip_score=0.6, strip_chars=1000)
    assert select(rows, scores, g) == [1, 0, 4, 3]  # c scores below the floor
    long = [(r, t * 4, a, b) for r, t, a, b in rows]  # 40 characters each
    g = GradingSettings(strips=5, min_strip_score=0.2, strip_chars=100)
    assert select(long, scores, g) == [1, 0]  # the character budget: what does not fit is skipped


def test_result_summary_is_json_ready_and_carries_no_text() -> None:
    import json

    from services.orchestrator.corrective.retrieval import CorrectiveResult

    r = CorrectiveResult(
        Grade.AMBIGUOUS, 0.6, "both", {"p_max": 0.5}, [], [], RefinedContext([]), "secret words", "rule"
    )
    got = r.summary()
    assert got["grade"] == "ambiguous" and got["action"] == "both" and got["rewrite"] == "rule"
    assert "secret words" not in json.dumps(got)
