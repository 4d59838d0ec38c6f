"""The accounting of ``rampart bench faults`` on synthetic inputs: what a window counts, how the
totals add up, which acknowledged documents count as lost, and the locust record it reads.

Killing programs of a real stack is tests/e2e/test_fault_bench.py's job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from services.evaluation.fault_bench import (
    BASELINE,
    read_records,
    reconcile,
    summarize_window,
    totals,
)


def rec(
    t: float,
    status: int = 200,
    ms: float = 100.0,
    degraded: list[str] | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    return {"t": t, "endpoint": "search", "status": status, "ms": ms, "degraded": degraded, "error": error}


def test_a_window_counts_only_requests_started_inside_it() -> None:
    records = [rec(9.9), rec(10.0), rec(15.0), rec(19.99), rec(20.0)]
    w = summarize_window("triton", records, 10.0, 20.0)
    assert w["requests"] == 3 and w["program"] == "triton" and w["seconds"] == 10.0


def test_a_window_names_the_degraded_stages_among_its_200s() -> None:
    records = [
        rec(1, degraded=["rerank"]),
        rec(2, degraded=["rerank", "factcheck"]),
        rec(3, degraded=[]),
        rec(4, status=503, error="unavailable: the orchestrator is down"),
        rec(5, status=0, degraded=None),  # no connection (locust's status 0)
    ]
    w = summarize_window("worker", records, 0, 10)
    assert w["statuses"] == {"0": 1, "200": 3, "503": 1}
    assert w["errors_5xx"] == 1 and w["no_connection"] == 1 and w["ok"] == 3
    assert w["degraded_share"] == round(2 / 3, 3)
    assert w["degraded_stages"] == {"factcheck": 1, "rerank": 2}
    assert w["errors"] == {"unavailable: the orchestrator is down": 1}


def test_a_window_without_requests_has_no_latency_and_no_share() -> None:
    w = summarize_window(BASELINE, [], 0, 5)
    assert w["requests"] == 0 and w["degraded_share"] == 0.0
    assert w["p50_ms"] is None and w["p95_ms"] is None


def test_latency_percentiles_cover_every_request_of_the_window() -> None:
    records = [rec(i, ms=float(10 * (i + 1))) for i in range(20)]
    w = summarize_window("ingest", records, 0, 100)
    assert w["p50_ms"] == pytest.approx(105.0)
    assert 180.0 <= w["p95_ms"] <= 200.0


def test_totals_weigh_the_degraded_share_by_each_windows_200s() -> None:
    windows = [
        summarize_window("a", [rec(1, degraded=["rerank"])] * 1 + [rec(2)] * 3, 0, 10),
        summarize_window("b", [rec(1, degraded=["factcheck"])] * 4 + [rec(2, status=504)], 0, 10),
    ]
    t = totals(windows)
    assert t["requests"] == 9 and t["errors_5xx"] == 1 and t["ok"] == 8
    assert t["degraded_share"] == round(5 / 8, 3)


def test_reconcile_counts_indexed_failed_and_lost() -> None:
    states: dict[str, str | None] = {
        "a": "indexed",  # indexed and found: kept
        "b": "failed",  # the status API reports it: flagged, not lost
        "c": "indexed",  # indexed but no search finds it: lost
        "d": None,  # unknown to the status API: lost
        "e": "pending",  # still pending after the settle wait: lost
    }
    result = reconcile(["a", "b", "c", "d", "e", "a"], states, found={"a"})
    assert result["acknowledged"] == 5  # an id acknowledged twice counts once
    assert (result["indexed"], result["failed"], result["lost"]) == (1, 1, 3)
    assert result["lost_ids"] == ["c", "d", "e"]
    assert result["lost_states"] == {"c": "indexed", "d": None, "e": "pending"}


def test_reconcile_of_nothing_acknowledged_loses_nothing() -> None:
    assert reconcile([], {}, set())["lost"] == 0


def test_a_torn_last_record_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text('{"t": 1, "status": 200, "ms": 5, "degraded": []}\n{"t": 2, "sta')
    assert [r["t"] for r in read_records(path)] == [1]
    assert read_records(tmp_path / "absent.jsonl") == []
