"""The pure parts of ``rampart bench stack``: figures, locust output, corpus and environment.

Starting the stack itself is the e2e suite's job (tests/e2e); the bench is measured by hand.
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from services.common.errors import RampartError
from services.common.types import Acl, Document
from services.evaluation.stack_bench import (
    LOCUSTFILE,
    bench_env,
    bench_principal,
    environ,
    folder_corpus,
    locust_command,
    paired_added_ms,
    parse_locust_failures,
    parse_locust_json,
    percentile_from_histogram,
    ratios,
    stage_medians,
    summarize,
    take_queries,
)


def test_summarize_gives_percentiles_mean_and_count() -> None:
    figures = summarize([float(v) for v in range(1, 101)])
    assert figures == {"p50_ms": 50.5, "p95_ms": 95.05, "mean_ms": 50.5, "n": 100.0}
    with pytest.raises(ValueError, match="no timings"):
        summarize([])


def test_ratios_divide_stack_by_embedded_p50_per_endpoint() -> None:
    rows = [
        {"mode": "stack", "endpoint": "search", "p50_ms": 120.0},
        {"mode": "embedded", "endpoint": "search", "p50_ms": 100.0},
        {"mode": "stack", "endpoint": "answer", "p50_ms": 90.0},  # no embedded row: no ratio
    ]
    assert ratios(rows) == {"search": 1.2}


def test_paired_added_is_the_median_per_query_difference() -> None:
    # a slow spell hit both modes on the third query: the paired figure ignores it
    assert paired_added_ms([110.0, 120.0, 900.0], [100.0, 100.0, 880.0]) == 20.0
    with pytest.raises(ValueError, match="equal"):
        paired_added_ms([1.0], [1.0, 2.0])


def test_stage_medians_take_each_stage_over_the_requests_that_report_it() -> None:
    per_request = [
        {"retrieve": 10.0, "rerank": 200.0},
        {"retrieve": 30.0, "rerank": 100.0},
        {"retrieve": 20.0},
    ]
    assert stage_medians(per_request) == {"rerank": 150.0, "retrieve": 20.0}
    assert stage_medians([]) == {}


def test_stage_table_puts_modes_side_by_side() -> None:
    from rich.console import Console

    from services.cli.bench import stage_table

    rows = [
        {"mode": "stack", "endpoint": "search", "stages_p50_ms": {"rerank": 250.0, "retrieve": 20.0}},
        {"mode": "embedded", "endpoint": "search", "stages_p50_ms": {"rerank": 200.0}},
    ]
    console = Console(width=120, record=True)
    console.print(stage_table(rows))
    text = console.export_text()
    assert "stack search" in text and "embedded search" in text
    rerank = next(line for line in text.splitlines() if "rerank" in line)
    assert "250" in rerank and "200" in rerank
    retrieve = next(line for line in text.splitlines() if "retrieve" in line)
    assert "20" in retrieve and "—" in retrieve


def test_take_queries_cycles_and_refuses_none() -> None:
    assert take_queries(["a", "b"], 5) == ["a", "b", "a", "b", "a"]
    assert take_queries(["a", "b", "c"], 2) == ["a", "b"]
    with pytest.raises(RampartError, match="no queries"):
        take_queries([], 3)


def test_histogram_percentile_follows_locust() -> None:
    hist = {1.0: 60, 10.0: 35, 100.0: 5}
    assert percentile_from_histogram(hist, 0.5) == 1.0
    assert percentile_from_histogram(hist, 0.9) == 10.0
    assert percentile_from_histogram(hist, 1.0) == 100.0
    assert percentile_from_histogram({}, 0.5) == 0.0


def test_parse_locust_json_aggregates_every_entry() -> None:
    entries = [
        {
            "name": "search",
            "num_requests": 8,
            "num_failures": 1,
            "total_response_time": 800.0,
            "start_time": 1000.0,
            "last_request_timestamp": 1004.0,
            "response_times": {"90": 6, "150": 2},
        },
        {
            "name": "other",
            "num_requests": 2,
            "num_failures": 0,
            "total_response_time": 200.0,
            "start_time": 1001.0,
            "last_request_timestamp": 1005.0,
            "response_times": {"90": 2},
        },
    ]
    figures = parse_locust_json(json.dumps(entries))
    assert figures == {
        "requests": 10.0,
        "failures": 1.0,
        "requests_per_s": 2.0,  # 10 requests over 1000.0 → 1005.0
        "p50_ms": 90.0,
        "p95_ms": 150.0,
        "mean_ms": 100.0,
    }
    idle = [{**entries[0], "num_requests": 0, "response_times": {}}]
    with pytest.raises(RampartError, match="no request"):
        parse_locust_json(json.dumps(idle))


def test_parse_locust_failures_names_the_errors() -> None:
    text = (
        "Method,Name,Error,Occurrences\n"
        'POST,search,"HTTPError(""429 Client Error"")",7\n'
        "POST,search,ConnectionRefusedError,2\n"
    )
    assert parse_locust_failures(text) == [
        'POST search: HTTPError("429 Client Error") (x7)',
        "POST search: ConnectionRefusedError (x2)",
    ]
    assert parse_locust_failures("Method,Name,Error,Occurrences\n") == []


def test_locust_command_is_bounded_and_headless(tmp_path: Path) -> None:
    argv = locust_command(
        "http://127.0.0.1:9", tmp_path / "run", seconds=30, users=3, spawn_rate=1.5, locust=Path("/x/locust")
    )
    assert argv[:3] == ["/x/locust", "-f", str(LOCUSTFILE)]
    assert LOCUSTFILE.exists()
    flags = dict(itertools.pairwise(argv))
    assert "--headless" in argv
    assert flags["-t"] == "30s" and flags["-u"] == "3" and flags["-r"] == "1.5"
    assert flags["--host"] == "http://127.0.0.1:9"
    assert flags["--csv"] == str(tmp_path / "run") and flags["--json-file"] == f"{tmp_path / 'run'}_final"


def test_bench_env_uses_private_ports_and_turns_caches_off(tmp_path: Path) -> None:
    ports = itertools.count(40000)
    env = bench_env(tmp_path, Path("models"), lambda: next(ports))
    port_values = [v for k, v in env.items() if k.endswith("PORT")]
    assert len(port_values) == 12 and len(set(port_values)) == 12
    # the metrics ports too: a second stack (or `rampart stack up`) must not hold any port the bench needs
    assert {"RAMPART_SERVE__METRICS_PORT", "RAMPART_STACK__WORKER_METRICS_PORT"} <= set(env)
    assert env["RAMPART_RERANK__CACHE_SIZE"] == "0"
    assert env["RAMPART_FACTCHECK__CELERY__CACHE_TTL_S"] == "0"
    assert env["RAMPART_GATEWAY__RATE_LIMIT_PER_MINUTE"] == "0"
    assert env["RAMPART_STACK__DIR"].startswith(str(tmp_path))
    assert Path(env["RAMPART_MODELS_DIR"]).is_absolute()


def test_environ_restores_what_was_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAMPART_BENCH_TEST_KEEP", "before")
    monkeypatch.delenv("RAMPART_BENCH_TEST_NEW", raising=False)
    with environ({"RAMPART_BENCH_TEST_KEEP": "during", "RAMPART_BENCH_TEST_NEW": "x"}):
        assert os.environ["RAMPART_BENCH_TEST_KEEP"] == "during"
        assert os.environ["RAMPART_BENCH_TEST_NEW"] == "x"
    assert os.environ["RAMPART_BENCH_TEST_KEEP"] == "before"
    assert "RAMPART_BENCH_TEST_NEW" not in os.environ


def test_bench_principal_reads_every_group() -> None:
    docs = [
        Document(id="a", tenant="bench", acl=Acl(groups=["hr"]), text="x"),
        Document(id="b", tenant="bench", acl=Acl(groups=["eng", "*"]), text="y"),
    ]
    who = bench_principal(docs)
    assert who.tenant == "bench" and set(who.groups) == {"hr", "eng", "*"}
    assert "ingest" in who.scopes


def test_folder_corpus_keeps_sidecars_and_stops_at_docs(tmp_path: Path) -> None:
    (tmp_path / "team").mkdir()
    (tmp_path / "team" / "a.md").write_text("# Leave\n\nTwenty weeks of leave.")
    (tmp_path / "team" / "a.md.meta.json").write_text(json.dumps({"acl": {"groups": ["hr"]}}))
    (tmp_path / "team" / "b.txt").write_text("Laptops are replaced every three years.")
    corpus = folder_corpus(tmp_path, docs=10)
    assert [d.id for d in corpus.documents] == ["team/a.md", "team/b.txt"]
    assert corpus.documents[0].acl.groups == ["hr"]
    assert corpus.queries  # the samples' questions
    assert len(folder_corpus(tmp_path, docs=1).documents) == 1
    with pytest.raises(RampartError, match="no supported documents"):
        folder_corpus(tmp_path / "team" / "missing", docs=5)


def test_bench_scale_refuses_a_bad_replica_count_naming_it() -> None:
    from typer.testing import CliRunner

    from services.cli.main import app

    result = CliRunner().invoke(app, ["bench", "scale", "--pipeline-replicas", "1,two"])
    assert result.exit_code != 0
    assert "'two'" in result.output and "--pipeline-replicas 1,2" in result.output
