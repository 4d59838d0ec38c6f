"""Evaluation harness: BEIR loading, ranx-backed metrics, reports and significance tests."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from services.common.errors import ErrorCode, RampartError
from services.evaluation.beir import (
    BeirDoc,
    available_splits,
    corpus_content_hash,
    iter_corpus,
    load_beir,
)
from services.evaluation.metrics import (
    evaluate_run,
    evaluate_run_per_query,
    latency_ms_p50,
    latency_ms_p95,
    latency_summary,
    validate_metrics,
)
from services.evaluation.report import (
    EvalReport,
    markdown_table,
    plot_bars,
    read_json,
    render_table,
    write_json,
)
from services.evaluation.significance import compare_pipelines, paired_test
from services.evaluation.splits import query_split_of

# ---------------------------------------------------------------------------------------------------
# Synthetic BEIR folders
# ---------------------------------------------------------------------------------------------------

CORPUS: list[dict[str, Any]] = [
    {"_id": "d1", "title": "Alpha", "text": "alpha text"},
    {"_id": "d2", "title": "Beta", "text": "beta text", "metadata": {"year": 2020}},
    {"_id": "d3", "title": "", "text": "gamma text"},
]
QUERIES: list[dict[str, Any]] = [
    {"_id": "q1", "text": "what is alpha"},
    {"_id": "q2", "text": "what is beta"},
    {"_id": "q3", "text": "unjudged in test"},
]
TEST_QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\nq2\td3\t0\n"
TRAIN_QRELS = "query-id\tcorpus-id\tscore\nq3\td3\t1\n"


def _jsonl(rows: Sequence[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def make_beir(root: Path, *, corpus: str | None = None, queries: str | None = None) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.jsonl").write_text(_jsonl(CORPUS) if corpus is None else corpus, encoding="utf-8")
    (root / "queries.jsonl").write_text(_jsonl(QUERIES) if queries is None else queries, encoding="utf-8")
    (root / "qrels").mkdir(exist_ok=True)
    (root / "qrels" / "test.tsv").write_text(TEST_QRELS, encoding="utf-8")
    (root / "qrels" / "train.tsv").write_text(TRAIN_QRELS, encoding="utf-8")
    return root


def _invalid(exc: pytest.ExceptionInfo[RampartError]) -> str:
    assert exc.value.code is ErrorCode.INVALID_ARGUMENT
    return exc.value.message


# ---------------------------------------------------------------------------------------------------
# BEIR loading
# ---------------------------------------------------------------------------------------------------


def test_load_test_split(tmp_path: Path) -> None:
    ds = load_beir(make_beir(tmp_path / "tiny"))
    assert ds.name == "tiny"
    assert ds.split == "test"
    assert list(ds.corpus) == ["d1", "d2", "d3"]
    assert ds.corpus["d2"] == BeirDoc("d2", "Beta", "beta text", {"year": 2020})
    assert ds.corpus["d1"].metadata == {}
    assert ds.queries == {"q1": "what is alpha", "q2": "what is beta"}  # q3 has no test qrels
    assert ds.qrels == {"q1": {"d1": 1}, "q2": {"d2": 2, "d3": 0}}
    assert ds.corpus_path == tmp_path / "tiny" / "corpus.jsonl"


def test_load_other_split_and_available_splits(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "tiny")
    assert available_splits(root) == ["test", "train"]
    ds = load_beir(root, "train")
    assert ds.queries == {"q3": "unjudged in test"}
    assert ds.qrels == {"q3": {"d3": 1}}


def test_query_halves_partition_the_split_by_the_fixed_hash(tmp_path: Path) -> None:
    queries = [{"_id": f"q{i}", "text": f"question {i}"} for i in range(40)]
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td1\t1\n" for i in range(40))
    root = make_beir(tmp_path / "many", queries=_jsonl(queries))
    (root / "qrels" / "test.tsv").write_text(qrels, encoding="utf-8")
    ds = load_beir(root)
    train, held = ds.half("train"), ds.half("heldout")
    assert ds.half("all") is ds
    assert (train.split, held.split) == ("test/train", "test/heldout")
    assert set(train.queries).isdisjoint(held.queries) and set(train.queries) | set(held.queries) == set(
        ds.queries
    )
    assert train.queries and held.queries and set(train.qrels) == set(train.queries)
    assert all(query_split_of(q) == "heldout" for q in held.queries)
    assert train.corpus is ds.corpus  # the corpus is shared, only the questions are split


def test_name_skips_a_folder_called_beir(tmp_path: Path) -> None:
    assert load_beir(make_beir(tmp_path / "hotpot" / "beir")).name == "hotpot"
    assert load_beir(make_beir(tmp_path / "x"), name="custom").name == "custom"


def test_content_hash_is_sha256_of_corpus_and_tracks_changes(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "tiny")
    ds = load_beir(root)
    expected = hashlib.sha256((root / "corpus.jsonl").read_bytes()).hexdigest()
    assert ds.content_hash() == expected == corpus_content_hash(root)
    assert corpus_content_hash(root / "corpus.jsonl") == expected
    (root / "corpus.jsonl").write_text(_jsonl(CORPUS[:2]), encoding="utf-8")
    assert ds.content_hash() != expected


def test_iter_corpus_streams_folder_or_file(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "tiny", corpus=_jsonl(CORPUS[:1]) + "\n   \n" + _jsonl(CORPUS[1:]))
    docs = list(iter_corpus(root))
    assert [d.doc_id for d in docs] == ["d1", "d2", "d3"]
    assert list(iter_corpus(root / "corpus.jsonl")) == docs
    with pytest.raises(RampartError) as exc:
        list(iter_corpus(tmp_path / "nowhere"))
    assert "corpus file not found" in _invalid(exc)


def test_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(RampartError) as exc:
        load_beir(tmp_path / "absent")
    assert "not found" in _invalid(exc)
    assert "expected BEIR layout" in exc.value.message


def test_missing_files_are_listed(tmp_path: Path) -> None:
    root = tmp_path / "partial"
    root.mkdir()
    (root / "corpus.jsonl").write_text(_jsonl(CORPUS), encoding="utf-8")
    with pytest.raises(RampartError) as exc:
        load_beir(root)
    msg = _invalid(exc)
    assert "queries.jsonl" in msg and "qrels/<split>.tsv" in msg
    assert "missing" in msg and "expected BEIR layout" in msg
    assert exc.value.details["missing"] == ["queries.jsonl", "qrels/<split>.tsv"]


def test_unknown_split_lists_available(tmp_path: Path) -> None:
    with pytest.raises(RampartError) as exc:
        load_beir(make_beir(tmp_path / "tiny"), "dev")
    msg = _invalid(exc)
    assert "'dev'" in msg and "test, train" in msg
    assert exc.value.details["available"] == ["test", "train"]


def test_malformed_corpus_json_names_file_and_line(tmp_path: Path) -> None:
    bad = _jsonl(CORPUS[:1]) + '{"_id": "d2", "text": \n'
    with pytest.raises(RampartError) as exc:
        load_beir(make_beir(tmp_path / "tiny", corpus=bad))
    assert "corpus.jsonl:2" in _invalid(exc) and "malformed JSON" in exc.value.message
    assert exc.value.details["line"] == 2


def test_malformed_queries_json_names_file_and_line(tmp_path: Path) -> None:
    bad = _jsonl(QUERIES[:2]) + "[1, 2]\n"
    with pytest.raises(RampartError) as exc:
        load_beir(make_beir(tmp_path / "tiny", queries=bad))
    assert "queries.jsonl:3" in _invalid(exc) and "JSON object" in exc.value.message


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        ({"title": "no id", "text": "t"}, "missing required field '_id'"),
        ({"_id": "d9", "title": "no text"}, "missing required field 'text'"),
        ({"_id": "d9", "text": 5}, "field 'text' must be a string"),
        ({"_id": "d9", "text": "t", "metadata": [1]}, "field 'metadata' must be an object"),
        ({"_id": "d1", "text": "again"}, "duplicate document _id 'd1'"),
    ],
)
def test_bad_corpus_records(tmp_path: Path, line: dict[str, Any], needle: str) -> None:
    with pytest.raises(RampartError) as exc:
        load_beir(make_beir(tmp_path / "tiny", corpus=_jsonl([*CORPUS, line])))
    assert needle in _invalid(exc)
    assert "corpus.jsonl:4" in exc.value.message


def test_qrels_referencing_unknown_query(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "tiny")
    (root / "qrels" / "test.tsv").write_text(TEST_QRELS + "q404\td1\t1\n", encoding="utf-8")
    with pytest.raises(RampartError) as exc:
        load_beir(root)
    msg = _invalid(exc)
    assert "'q404'" in msg and "queries.jsonl" in msg
    assert exc.value.details["unknown_query_ids"] == ["q404"]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (TEST_QRELS + "q1\td2\thigh\n", "test.tsv:5: relevance score must be an integer"),
        (TEST_QRELS + "q1 d2 1\n", "test.tsv:5: expected 3 tab-separated columns"),
        ("query-id\tcorpus-id\tscore\n\n", "has no judgements"),
    ],
)
def test_malformed_qrels(tmp_path: Path, content: str, needle: str) -> None:
    root = make_beir(tmp_path / "tiny")
    (root / "qrels" / "test.tsv").write_text(content, encoding="utf-8")
    with pytest.raises(RampartError) as exc:
        load_beir(root)
    assert needle in _invalid(exc)


def test_qrels_without_header_still_load(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "tiny")
    (root / "qrels" / "test.tsv").write_text("q1\td1\t1\n", encoding="utf-8")
    assert load_beir(root).qrels == {"q1": {"d1": 1}}


# ---------------------------------------------------------------------------------------------------
# Metrics (ranx)
# ---------------------------------------------------------------------------------------------------

QRELS = {"q1": {"d1": 1}, "q2": {"d2": 1, "d3": 1}, "q3": {"d4": 1}}
LOG2_3 = math.log2(3)


def test_perfect_run_scores_one() -> None:
    run = {"q1": {"d1": 3.0}, "q2": {"d2": 2.0, "d3": 1.0}, "q3": {"d4": 0.1}}
    assert evaluate_run(QRELS, run) == pytest.approx({"ndcg@10": 1.0, "recall@100": 1.0, "mrr@10": 1.0})


def test_hand_computed_values_and_missing_query_counts_zero() -> None:
    run = {
        "q1": {"x": 0.9, "d1": 0.5},  # relevant at rank 2
        "q2": {"d2": 0.9, "x": 0.8, "d3": 0.7},  # relevant at ranks 1 and 3
        # q3 missing entirely -> 0 on every metric, still in the mean
        "q-unjudged": {"d1": 1.0},  # no qrels: ignored
    }
    per_query = evaluate_run_per_query(QRELS, run)
    ndcg_q1 = 1 / LOG2_3
    ndcg_q2 = (1 + 1 / 2) / (1 + 1 / LOG2_3)
    assert per_query["mrr@10"] == pytest.approx({"q1": 0.5, "q2": 1.0, "q3": 0.0})
    assert per_query["ndcg@10"] == pytest.approx({"q1": ndcg_q1, "q2": ndcg_q2, "q3": 0.0})
    assert per_query["recall@100"] == pytest.approx({"q1": 1.0, "q2": 1.0, "q3": 0.0})
    assert list(per_query["mrr@10"]) == ["q1", "q2", "q3"]
    means = evaluate_run(QRELS, run)
    assert means == pytest.approx({"ndcg@10": (ndcg_q1 + ndcg_q2) / 3, "recall@100": 2 / 3, "mrr@10": 0.5})


def test_cutoffs_empty_results_and_zero_relevance() -> None:
    qrels = {**QRELS, "q4": {"d5": 0}}  # only judged non-relevant -> always 0
    run = {"q1": {}, "q2": {"d2": 0.9, "x": 0.8, "d3": 0.7}, "q3": {"d4": 1.0}, "q4": {"d5": 1.0}}
    scores = evaluate_run_per_query(qrels, run, ["recall@1", "mrr@10", "ndcg@10"])
    assert scores["recall@1"] == pytest.approx({"q1": 0.0, "q2": 0.5, "q3": 1.0, "q4": 0.0})
    assert scores["mrr@10"] == pytest.approx({"q1": 0.0, "q2": 1.0, "q3": 1.0, "q4": 0.0})
    assert scores["ndcg@10"]["q4"] == 0.0


def test_ties_are_broken_by_doc_id_descending() -> None:
    run = {"q1": {"d1": 1.0, "a": 1.0, "z": 1.0}}  # order z, d1, a -> relevant at rank 2
    assert evaluate_run_per_query({"q1": {"d1": 1}}, run, ["mrr@10"])["mrr@10"] == {"q1": 0.5}


def test_empty_run_is_all_zero_without_ranx_crash() -> None:
    assert evaluate_run(QRELS, {}) == {"ndcg@10": 0.0, "recall@100": 0.0, "mrr@10": 0.0}
    assert evaluate_run(QRELS, {"q1": {}, "q2": {}}, ["mrr@10"]) == {"mrr@10": 0.0}


@pytest.mark.parametrize(
    ("qrels", "run", "metrics", "needle"),
    [
        (QRELS, {}, ["ndcg@ten"], "unknown metric 'ndcg@ten'"),
        (QRELS, {}, [], "no metrics requested"),
        ({}, {}, ["mrr@10"], "qrels are empty"),
        ({"q1": {}}, {}, ["mrr@10"], "qrels for query 'q1' are empty"),
        ({"q1": {"d1": 1.5}}, {}, ["mrr@10"], "must be an integer"),
        (QRELS, {"q1": {"d1": float("nan")}}, ["mrr@10"], "scores must be finite"),
        (QRELS, {"q1": ["d1"]}, ["mrr@10"], "must be a mapping"),
    ],
)
def test_metric_input_errors(
    qrels: dict[str, dict[str, int]], run: dict[str, dict[str, float]], metrics: list[str], needle: str
) -> None:
    with pytest.raises(RampartError) as exc:
        evaluate_run(qrels, run, metrics)
    assert needle in _invalid(exc)


def test_validate_metrics_dedupes() -> None:
    assert validate_metrics(["ndcg@10", "map@100", "ndcg@10", "precision@5-l2", "rbp.95"]) == (
        "ndcg@10",
        "map@100",
        "precision@5-l2",
        "rbp.95",
    )


def test_latency_percentiles() -> None:
    lat = [float(i) for i in range(1, 101)]
    assert latency_ms_p50(lat) == pytest.approx(50.5)
    assert latency_ms_p95(lat) == pytest.approx(95.05)
    assert latency_summary([7.0]) == {"latency_ms_p50": 7.0, "latency_ms_p95": 7.0}
    for bad in ([], [1.0, -2.0], [float("inf")]):
        with pytest.raises(RampartError):
            latency_summary(bad)


# ---------------------------------------------------------------------------------------------------
# Significance
# ---------------------------------------------------------------------------------------------------


def test_identical_pipelines_are_not_significant() -> None:
    a = {f"q{i}": i / 10 for i in range(10)}
    res = paired_test(a, dict(a), baseline_name="bm25", candidate_name="hybrid")
    assert res.p_value == 1.0 and not res.significant
    assert (res.wins, res.ties, res.losses) == (0, 10, 0)
    assert paired_test(a, dict(a), method="t-test").p_value == 1.0


def test_consistent_improvement_is_significant_and_deterministic() -> None:
    base = {f"q{i}": 0.2 + 0.05 * (i % 4) for i in range(30)}
    cand = {q: v + 0.1 + 0.01 * (i % 3) for i, (q, v) in enumerate(base.items())}
    r1 = paired_test(base, cand, n_permutations=2000)
    r2 = paired_test(base, cand, n_permutations=2000)
    assert r1 == r2
    assert r1.significant and r1.p_value == pytest.approx(1 / 2001)
    assert r1.delta == pytest.approx(0.11, abs=0.01) and r1.wins == 30
    t = paired_test(base, cand, method="t-test")
    assert t.significant and t.p_value < 1e-6
    assert "significant" in r1.summary()


def test_small_mixed_difference_is_not_significant() -> None:
    base = {f"q{i}": 0.5 for i in range(8)}
    cand = {f"q{i}": 0.5 + (0.1 if i % 2 else -0.09) for i in range(8)}
    res = paired_test(base, cand, n_permutations=2000)
    assert res.p_value > 0.5 and not res.significant


def test_compare_pipelines_and_errors() -> None:
    per_query = {
        "bm25": {"ndcg@10": {"q1": 0.1, "q2": 0.2, "q3": 0.3}},
        "hybrid": {"ndcg@10": {"q1": 0.4, "q2": 0.5, "q3": 0.6}},
    }
    [res] = compare_pipelines(per_query, "bm25", n_permutations=500)
    assert (res.baseline, res.candidate, res.metric) == ("bm25", "hybrid", "ndcg@10")
    # only 2^3 sign patterns exist: the best achievable two-sided p is 2/8
    assert res.p_value == pytest.approx(0.25, abs=0.06)
    with pytest.raises(RampartError):
        compare_pipelines(per_query, "dense")
    with pytest.raises(RampartError):
        paired_test({"q1": 0.1, "q2": 0.2}, {"q1": 0.1, "q3": 0.2})


# ---------------------------------------------------------------------------------------------------
# Reports
# ---------------------------------------------------------------------------------------------------


def _report(**overrides: object) -> EvalReport:
    data: dict[str, object] = {
        "dataset": "tiny",
        "split": "test",
        "num_queries": 3,
        "num_docs": 4,
        "created_at": "2025-01-02T03:04:05Z",
        "command": "rampart eval tiny",
        "pipelines": {
            "bm25": {
                "ndcg@10": 0.5,
                "recall@100": 0.8,
                "mrr@10": 0.45,
                "latency_ms_p50": 3.0,
                "latency_ms_p95": 9.25,
                "note": "baseline",
            },
            "hybrid": {
                "ndcg@10": 0.625,
                "recall@100": 0.8,
                "mrr@10": 0.6,
                "latency_ms_p50": 12.0,
                "latency_ms_p95": 20.0,
                "index_seconds": 4.5,
            },
        },
    }
    data.update(overrides)
    return EvalReport.model_validate(data)


def test_report_json_round_trip(tmp_path: Path) -> None:
    report = _report()
    path = write_json(report, tmp_path / "out" / "report.json")
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert raw["dataset"] == "tiny" and raw["num_queries"] == 3
    assert raw["pipelines"]["bm25"]["ndcg@10"] == 0.5
    assert raw["pipelines"]["bm25"]["note"] == "baseline"
    assert read_json(path) == report
    assert list(tmp_path.joinpath("out").iterdir()) == [path]  # no temp files left behind


def test_report_validation() -> None:
    with pytest.raises(ValidationError, match="missing"):
        _report(pipelines={"bm25": {"ndcg@10": 0.5}})
    with pytest.raises(ValidationError):
        _report(pipelines={})
    bm25 = _report().pipelines["bm25"]
    with pytest.raises(ValidationError, match="must be a number"):
        _report(pipelines={"bm25": {**bm25, "mrr@10": "high"}})
    with pytest.raises(ValidationError, match="finite"):
        _report(pipelines={"bm25": {**bm25, "ndcg@10": float("nan")}})
    naive = _report(created_at="2025-01-02T03:04:05")
    assert naive.created_at.tzinfo is not None


def test_read_json_errors(tmp_path: Path) -> None:
    with pytest.raises(RampartError):
        read_json(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"dataset": "x"}', encoding="utf-8")
    with pytest.raises(RampartError) as exc:
        read_json(tmp_path / "bad.json")
    assert "not a valid evaluation report" in _invalid(exc)


def test_markdown_table_bolds_best_per_column() -> None:
    assert markdown_table(_report()) == (
        "| pipeline | ndcg@10 | recall@100 | mrr@10 | latency_ms_p50 | latency_ms_p95 | index_seconds |\n"
        "| :--- | ---: | ---: | ---: | ---: | ---: | ---: |\n"
        "| bm25 | 0.5000 | **0.8000** | 0.4500 | **3.0** | **9.2** | – |\n"
        "| hybrid | **0.6250** | **0.8000** | **0.6000** | 12.0 | 20.0 | **4.5** |\n"
    )


def test_single_pipeline_has_no_bold() -> None:
    report = _report(pipelines={"bm25": _report().pipelines["bm25"]})
    assert "**" not in markdown_table(report)


def test_values_equal_at_display_precision_are_all_bold() -> None:
    bm25 = _report().pipelines["bm25"]
    a = {**bm25, "latency_ms_p50": 10.26, "ndcg@10": 0.7}
    b = {**bm25, "latency_ms_p50": 10.31}
    lines = markdown_table(_report(pipelines={"a": a, "b": b})).splitlines()
    assert lines[2].startswith("| a | **0.7000** | **0.8000** | **0.4500** | **10.3** |")
    assert lines[3].startswith("| b | 0.5000 | **0.8000** | **0.4500** | **10.3** |")


def test_render_table_marks_best_in_bold() -> None:
    from rich.console import Console

    table = render_table(_report())
    assert [c.header for c in table.columns][:4] == ["pipeline", "ndcg@10 ↑", "recall@100 ↑", "mrr@10 ↑"]
    ndcg_cells = list(table.columns[1].cells)
    assert ndcg_cells == ["0.5000", "[bold]0.6250[/bold]"]
    assert list(table.columns[4].cells) == ["[bold]3.0[/bold]", "12.0"]  # latency: lower wins
    console = Console(record=True, width=160)
    console.print(table)
    text = console.export_text()
    assert "tiny (test)" in text and "hybrid" in text and "0.6250" in text


def test_plot_bars_writes_deterministic_png(tmp_path: Path) -> None:
    report = _report()
    first = plot_bars(report, tmp_path / "a" / "bars.png")
    second = plot_bars(report, tmp_path / "b.png")
    data = first.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5_000
    assert data == second.read_bytes()
