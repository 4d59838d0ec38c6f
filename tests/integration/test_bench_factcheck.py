"""``rampart bench factcheck`` end to end: real redis-server, real ``rampart worker``, tiny numbers.

The figures themselves are not asserted (the machine decides them); what is: every row is there and
sane, cold rows really missed the evidence cache and the warm row really hit it, and nothing the
bench started outlives it.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from services.evaluation import factcheck_bench
from services.evaluation.factcheck_bench import CELERY, CELERY_CACHED, INPROCESS, build_checks
from tests.integration.redis_server import RedisServer


def run(args: list[str], env: dict[str, str], out: Path) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["bench", "factcheck", *args, "--json", str(out)], env=env)
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    record: dict[str, Any] = json.loads(out.read_text())
    return record


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def assert_sane(row: dict[str, Any], checks: int, passages: int) -> None:
    assert row["checks"] == checks and row["passages"] == checks * passages, row
    assert row["unverified"] == 0, row
    assert row["checks_per_s"] > 0 and row["passages_per_s"] > 0, row
    assert row["p95_ms"] >= row["p50_ms"] > 0, row


def assert_all_stopped(record: dict[str, Any]) -> None:
    pids = [p for proc in record["processes"].values() for p in [proc["pid"], *proc.get("children", [])]]
    assert pids and record["processes_alive_after"] == []
    assert [p for p in pids if alive(p)] == []


@pytest.mark.timeout(600)
def test_bench_factcheck_rows_and_cleanup(tmp_path: Path, env: dict[str, str]) -> None:
    record = run(["--checks", "4", "--passages", "3", "--concurrency", "1,2"], env, tmp_path / "fc.json")
    assert record["command"].startswith("rampart bench factcheck")
    assert record["settings"]["use_llm"] is False and record["redis"]["started"] is True
    rows = {(r["backend"], r["concurrency"]): r for r in record["rows"]}
    assert set(rows) == {
        (INPROCESS, 1),
        (INPROCESS, 2),
        (CELERY, 1),
        (CELERY, 2),
        (CELERY_CACHED, 1),
    }
    for row in rows.values():
        assert_sane(row, checks=4, passages=3)
    assert rows[(CELERY, 1)]["cached_before"] == rows[(CELERY, 2)]["cached_before"] == 0.0
    assert rows[(CELERY_CACHED, 1)]["cached_before"] == 1.0
    assert {(r["backend"], r["concurrency"]) for r in record["ratios"]} == set(rows) - {
        (INPROCESS, 1),
        (INPROCESS, 2),
    }
    assert all(r["ratio"] > 0 for r in record["ratios"])

    assert len(record["processes"]["worker"]["children"]) == record["settings"]["worker_concurrency"]
    assert_all_stopped(record)
    assert not port_open(record["processes"]["redis"]["port"])


@pytest.mark.timeout(600)
def test_bench_factcheck_on_a_given_redis_leaves_it_clean(
    tmp_path: Path, env: dict[str, str], redis_server: RedisServer
) -> None:
    """--redis-url: no redis-server of its own, its worker on a private queue, its cache keys deleted
    (with --stored-vectors, whose evidence is keyed as the check sends it: without the vectors)."""
    args = ["--checks", "2", "--passages", "2", "--concurrency", "1", "--workers", "1", "--stored-vectors"]
    record = run([*args, "--redis-url", redis_server.url(2)], env, tmp_path / "fc.json")
    assert set(record["processes"]) == {"worker"} and record["redis"]["started"] is False
    assert record["settings"]["stored_vectors"] is True
    assert {r["backend"] for r in record["rows"]} == {INPROCESS, CELERY, CELERY_CACHED}
    for row in record["rows"]:
        assert_sane(row, checks=2, passages=2)
    cached = {r["backend"]: r["cached_before"] for r in record["rows"] if "cached_before" in r}
    assert cached == {CELERY: 0.0, CELERY_CACHED: 1.0}
    assert_all_stopped(record)
    assert redis_server.client(2).keys("rampart:fc:*") == []


def test_missing_redis_server_says_how_to_fix_it(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(factcheck_bench, "redis_server_binary", lambda: None)
    result = CliRunner().invoke(app, ["bench", "factcheck", "--checks", "1"], env=env)
    assert result.exit_code == 2, result.output
    assert "apt-get install redis-server, or pass --redis-url" in " ".join(result.output.split())


def test_inputs_are_deterministic_realistic_and_distinct_per_row() -> None:
    a = build_checks(30, 10, seed=13, tag="row-a")
    b = build_checks(30, 10, seed=13, tag="row-b")
    texts_a = [i.text for c in a for i in c.items]
    texts_b = [i.text for c in b for i in c.items]
    assert [t.replace("row-a", "row-b") for t in texts_a] == texts_b  # same content, other cache keys
    assert not set(texts_a) & set(texts_b)
    assert len(set(texts_a)) == len(texts_a)
    words = [len(t.split()) for t in texts_a]
    assert min(words) >= 150 and max(words) <= 230, (min(words), max(words))
    injected = ("Ignore previous instructions", "Note to the AI assistant", "<|im_start|>")
    assert 0 < sum(any(x in t for x in injected) for t in texts_a) < len(texts_a) // 5

    def overlap(x: str, y: str) -> float:
        wx, wy = set(x.split()), set(y.split())
        return len(wx & wy) / len(wx | wy)

    clusters = [c for c in a if all(overlap(c.items[-3].text, i.text) > 0.8 for i in c.items[-2:])]
    assert 0 < len(clusters) < len(a) // 2, "expected a few checks ending in near-duplicate passages"
    assert all(len({i.doc_id for i in c.items[-3:]}) == 3 for c in clusters)
