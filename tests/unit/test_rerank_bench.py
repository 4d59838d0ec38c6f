"""The rerank bench's harness: backends take turns, every row is measured, ratios pair equal settings."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence

from services.evaluation.rerank_bench import measure_group, ratios, run_rerank_bench


def _sleeper(seconds: float, log: list[str], name: str):  # type: ignore[no-untyped-def]
    lock = threading.Lock()

    def score(query: str, passages: Sequence[str]) -> list[float]:
        with lock:
            log.append(name)
        time.sleep(seconds)
        return [0.0] * len(passages)

    return score


def test_backends_take_turns_and_are_timed() -> None:
    log: list[str] = []
    figures = measure_group(
        {"fast": _sleeper(0.001, log, "fast"), "slow": _sleeper(0.004, log, "slow")},
        batch=2,
        min_pairs=16,
        warmup=0,
        rounds=4,
    )
    assert figures["fast"]["calls"] == figures["slow"]["calls"] == 8
    # four rounds of two calls each, alternating, not eight of one then eight of the other
    switches = sum(1 for a, b in itertools.pairwise(log) if a != b)
    assert switches >= 4
    assert figures["fast"]["pairs_per_s"] > 1.5 * figures["slow"]["pairs_per_s"]
    assert figures["slow"]["p50_ms"] >= 4.0
    assert len(figures["fast"]["round_pairs_per_s"]) == len(figures["slow"]["round_pairs_per_s"]) == 4


def test_every_round_fills_the_pool_at_high_concurrency() -> None:
    """16 callers, 4 rounds: each round runs 16 calls, whatever the minimum pair count."""
    log: list[str] = []
    figures = measure_group(
        {"a": _sleeper(0.0, log, "a"), "b": _sleeper(0.0, log, "b")},
        batch=32,
        concurrency=16,
        min_pairs=64,
        warmup=0,
        rounds=4,
    )
    assert figures["a"]["calls"] == 64
    assert len(figures["a"]["round_pairs_per_s"]) == 4


def test_paired_ratio_is_the_median_of_round_ratios() -> None:
    """A slow round that hit one backend's total moves ``ratio``; the rounds' median stays put."""
    rows = [
        {
            "backend": "local",
            "batch": 8,
            "concurrency": 16,
            "pairs_per_s": 50.0,
            "round_pairs_per_s": [50.0, 50.0, 50.0, 50.0],
        },
        {
            "backend": "remote",
            "batch": 8,
            "concurrency": 16,
            "pairs_per_s": 40.0,
            "round_pairs_per_s": [49.0, 51.0, 20.0, 50.0],
        },
    ]
    (r,) = ratios(rows, "remote", "local")
    assert r["ratio"] == 0.8
    assert r["paired_ratio"] == 0.99


def test_rows_cover_every_backend_batch_and_concurrency() -> None:
    log: list[str] = []
    backends = {"local": _sleeper(0.001, log, "local"), "remote": _sleeper(0.001, log, "remote")}
    rows = run_rerank_bench(
        backends, batches=(1, 4), concurrency={"local": (1, 4), "remote": (1, 4)}, min_pairs=8
    )
    keys = [(r["backend"], r["batch"], r["concurrency"]) for r in rows]
    assert keys == [(n, b, c) for n in ("local", "remote") for b in (1, 4) for c in (1, 4)]
    assert all(r["pairs_per_s"] > 0 for r in rows)
    assert {(r["batch"], r["concurrency"]) for r in ratios(rows, "remote", "local")} == {
        (1, 1),
        (1, 4),
        (4, 1),
        (4, 4),
    }
