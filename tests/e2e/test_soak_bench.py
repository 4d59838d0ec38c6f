"""``rampart bench soak`` for real, briefly: the stack under load with the replacing ingest loop, and
every program's memory sampled over its process tree (issue 36, point 7; the 30-minute run whose
figures docs/benchmarks.md keeps is `make soak`). This checks the bench works, not the figures: a
45-second run says nothing about a leak."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.e2e.conftest import _loopback_only

RAMPART = Path(sys.executable).with_name("rampart")


def test_a_short_soak_samples_every_program_and_reports_the_load(models_dir: Path, tmp_path: Path) -> None:
    assert _loopback_only(), "run it in a loopback-only namespace: python -m tests.e2e.isolated pytest …"
    out = tmp_path / "soak.json"
    done = subprocess.run(
        [
            str(RAMPART),
            "bench",
            "soak",
            str(REPO / "samples"),
            "--docs",
            "8",
            "--minutes",
            "0.75",
            "--warmup-s",
            "5",
            "--sample-s",
            "3",
            "--json",
            str(out),
        ],
        env={**os.environ, "RAMPART_MODELS_DIR": str(models_dir.resolve())},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    # exit 0 (flat) or 1 (a program grew or restarted in 45 s): either way the figures were written
    assert done.returncode in (0, 1), done.stdout[-2000:] + done.stderr[-3000:]
    record = json.loads(out.read_text())
    memory = record["memory"]
    # every supervisord program of the stack, each read as a live tree
    assert {"gateway", "orchestrator", "retrieval", "ingest", "worker", "redis"} <= set(memory), memory
    for name, m in memory.items():
        assert m["samples"] >= 5 and m["peak_mib"] > 1, (name, m)
        assert m["first_mib"] is not None and m["last_mib"] is not None and m["growth"] is not None, (name, m)
        assert m["restarted"] is False, name
    assert record["flat"] == all(m["flat"] for m in memory.values())
    # the orchestrator's tree holds Ray (GCS, raylet, the Serve replicas): far more than one process
    assert memory["orchestrator"]["peak_mib"] > memory["redis"]["peak_mib"]
    parts = record["parts"]
    assert len(parts) == 5 and sum(p["requests"] for p in parts) > 0
    assert sum(p["errors_5xx"] for p in parts) == 0
    documents = record["documents"]
    # replacements at newer versions are accepted; only a program down could refuse one
    assert documents["acknowledged"] > 0 and not documents["refused"], documents
    assert "bench soak" in done.stdout and "load per fifth" in done.stdout  # the tables
    assert ("memory flat" if record["flat"] else "memory NOT flat") in done.stderr  # the verdict
