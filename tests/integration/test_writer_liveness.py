"""A writer's liveness as the OpenSearch claims read it (services/retrieval/opensearch_repair.py): a
process that was SIGKILLed but not yet reaped by its parent (a zombie) still answers signal 0, yet will
never finish its write; counted alive, it made other writers wait out their claim timeout."""

from __future__ import annotations

import signal
import subprocess
import time

from services.common.processes import pid_alive


def test_a_killed_unreaped_writer_is_gone_and_a_running_one_alive() -> None:
    proc = subprocess.Popen(["sleep", "60"])
    try:
        assert pid_alive(proc.pid)
        proc.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not pid_alive(proc.pid)  # a zombie: signal 0 still succeeds
    finally:
        proc.kill()
        proc.wait()
    assert not pid_alive(proc.pid)  # reaped: gone from the process table
