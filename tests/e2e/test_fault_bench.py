"""``rampart bench faults`` for real, briefly: the stack under load, Triton SIGKILLed once, and every
document the API acknowledged meanwhile still indexed (issue 36, point 7; the full run of every
program is `make bench-faults`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from services.common.processes import pid_alive
from tests.conftest import REPO
from tests.e2e.conftest import _loopback_only

RAMPART = Path(sys.executable).with_name("rampart")


def test_killing_triton_under_load_degrades_rerank_and_loses_no_acknowledged_document(
    models_dir: Path, tmp_path: Path
) -> None:
    assert _loopback_only(), "run it in a loopback-only namespace: python -m tests.e2e.isolated pytest …"
    out = tmp_path / "faults.json"
    before = bench_tritonservers()
    done = subprocess.run(
        [
            str(RAMPART),
            "bench",
            "faults",
            str(REPO / "samples"),
            "--docs",
            "8",
            "--programs",
            "triton",
            "--window-s",
            "4",
            "--recover-timeout-s",
            "60",
            "--json",
            str(out),
        ],
        env={**os.environ, "RAMPART_MODELS_DIR": str(models_dir.resolve())},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    record = json.loads(out.read_text())
    baseline, triton = record["windows"]
    assert (baseline["program"], triton["program"]) == ("none", "triton")
    assert triton["requests"] > 0 and triton["errors_5xx"] == 0  # a dead reranker degrades, never fails
    assert set(triton["degraded_stages"]) <= {"rerank", "factcheck"}
    assert triton["back_s"] is not None and triton["undegraded_s"] is not None
    documents = record["documents"]
    assert documents["acknowledged"] > 0 and documents["lost"] == 0
    assert documents["indexed"] + documents["failed"] == documents["acknowledged"]
    # the SIGKILLed launcher's tritonserver died with it (processes.die_with_parent), its python-backend
    # stubs with it or at the restart (processes.GroupRecord), and the stack's shutdown stopped the
    # restarted twin: none of the bench's servers or stubs outlives the bench
    assert bench_tritonservers() - before == set()


def bench_tritonservers() -> set[tuple[int, str]]:
    """(pid, command line) of running tritonservers and python-backend stubs of a fault bench's stack
    (under /tmp/rfb-*: the server's --model-repository, the stub's model path)."""
    found = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ours = ("tritonserver" in cmd and "--model-repository=/tmp/rfb-" in cmd) or (
            "triton_python_backend_stub" in cmd and "/tmp/rfb-" in cmd
        )
        if ours and pid_alive(int(proc.name)):
            found.add((int(proc.name), cmd))
    return found
