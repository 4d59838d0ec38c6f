"""The soak bench's accounting on synthetic samples (``services/evaluation/soak_bench.py``): what
counts as flat, what the warm-up leaves out, and what a run too short to judge reports; and its
memory reading on a real process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from services.evaluation.soak_bench import (
    MIB,
    MemorySampler,
    ReplaceLoop,
    latency_parts,
    memory_growth,
    tree_pss,
)
from services.evaluation.stack_bench import Target


def ramp(
    start_mib: float, end_mib: float, *, seconds: int = 600, every: int = 10
) -> list[tuple[float, float]]:
    """Samples every ``every`` s over ``[0, seconds)`` rising linearly from ``start_mib`` to ``end_mib``."""
    n = seconds // every
    return [(t * every, (start_mib + (end_mib - start_mib) * t / (n - 1)) * MIB) for t in range(n)]


def test_a_steady_program_is_flat() -> None:
    got = memory_growth(ramp(200, 200), 0, 600, warmup_s=0, bound=0.10)
    assert got["flat"] is True and got["growth"] == 0.0 and got["first_mib"] == got["last_mib"] == 200.0
    assert got["slope_mib_per_h"] == 0.0 and got["peak_mib"] == 200.0


def test_a_leak_past_the_bound_is_not_flat_and_its_slope_is_per_hour() -> None:
    got = memory_growth(ramp(200, 300), 0, 600, warmup_s=0, bound=0.10)
    assert got["flat"] is False and got["growth"] > 0.10
    # 100 MiB over 590 s of samples is about 610 MiB an hour
    assert got["slope_mib_per_h"] == pytest.approx(100 / 590 * 3600, rel=0.01)


def test_growth_within_the_bound_is_flat() -> None:
    got = memory_growth(ramp(200, 215), 0, 600, warmup_s=0, bound=0.10)
    assert got["flat"] is True and 0 < got["growth"] <= 0.10


def test_the_warm_up_is_left_out() -> None:
    """Models loading in the first two minutes (100 → 400 MiB) are not a leak."""
    loading = [(t, (100 + 300 * min(t, 120) / 120) * MIB) for t in range(0, 600, 10)]
    assert memory_growth(loading, 0, 600, warmup_s=0, bound=0.10)["flat"] is False
    settled = memory_growth(loading, 0, 600, warmup_s=130, bound=0.10)
    assert settled["flat"] is True and settled["first_mib"] == 400.0


def test_too_short_a_run_says_nothing() -> None:
    got = memory_growth([(5.0, 100 * MIB)], 0, 600, warmup_s=0, bound=0.10)
    assert got["flat"] is None and got["growth"] is None and got["slope_mib_per_h"] is None


def test_the_load_is_cut_into_fifths() -> None:
    records = [{"t": t, "status": 200 if t < 80 else 503, "ms": 10.0 + t} for t in range(100)]
    parts = latency_parts(records, 0, 100)
    assert [p["requests"] for p in parts] == [20] * 5
    assert [p["errors_5xx"] for p in parts] == [0, 0, 0, 0, 20]


def test_the_replace_loop_cycles_a_fixed_pool_of_ids_with_new_text() -> None:
    loop = ReplaceLoop(Target("stack", "http://127.0.0.1:1", "k"), "r1", 1.0, pool=3)
    docs = [loop.document(n) for n in range(7)]
    assert len({d["id"] for d in docs}) == 3 and docs[0]["id"] == docs[3]["id"] == docs[6]["id"]
    assert len({d["text"] for d in docs}) == 7
    # each round a newer version of the same ids: a replacement, which ingest accepts
    assert [d["version"] for d in docs if d["id"] == docs[0]["id"]] == [1, 2, 3]


def test_memory_is_read_over_the_whole_process_tree() -> None:
    """A parent whose child holds 64 MiB: the tree's figure counts the child's pages."""
    code = (
        "import subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', "
        "'import time; b = bytearray(64 * 1024 * 1024); b[::4096] = b\"x\" * len(b[::4096]); time.sleep(60)']); "
        "time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        got = 0
        while time.monotonic() < deadline:
            got = tree_pss(parent.pid)
            if got > 64 * MIB:
                break
            time.sleep(0.2)
        assert got > 64 * MIB, got / MIB
        sampler = MemorySampler(lambda: [("toy", parent.pid), ("gone", 0)], interval_s=60)
        sampler.sample()
        assert list(sampler.samples) == ["toy"] and sampler.samples["toy"][0][1] > 64 * MIB
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # the child too
        parent.wait()
    assert tree_pss(parent.pid) == 0  # gone: nothing to read
