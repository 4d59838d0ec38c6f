"""`rampart stack up` as an operator runs it: a second `up` against a running stack refuses without
touching it; a stack that cannot get ready in time is stopped again, and the error says why."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from services.stack.control import Supervisor
from tests.conftest import flat
from tests.e2e.conftest import Stack, stack_env_vars

RAMPART = Path(sys.executable).with_name("rampart")


def rampart(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(RAMPART), *args], env=env, capture_output=True, text=True, timeout=300)


def test_up_beside_a_running_stack_refuses_and_leaves_it_running(stack: Stack) -> None:
    # the stack fixture's settings are in this process's environment: same stack directory
    done = rampart(dict(os.environ), "stack", "up", "--detach")
    assert done.returncode == 2, done.stderr
    assert "already running" in flat(done.stderr) and "rampart stack down" in flat(done.stderr)
    stack.wait_ready(60)


def test_up_that_cannot_get_ready_stops_everything_and_shows_the_logs(models_dir: Path) -> None:
    work = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))  # short: unix socket paths <= 108 bytes
    try:
        env = {**os.environ, **stack_env_vars(work, models_dir), "RAMPART_STACK__READY_TIMEOUT_S": "3"}
        done = rampart(env, "stack", "up", "--detach")
        message = flat(done.stderr)
        assert done.returncode == 2, done.stderr
        assert "stack not ready after 3s" in message
        # the report: supervisord's log tail and every program's state and log tail
        assert "--- supervisord ---" in message and "--- redis (" in message
        assert not Supervisor(work / "stack").running()
        with pytest.raises(OSError):  # redis, started first, is stopped again
            socket.create_connection(("127.0.0.1", int(env["RAMPART_STACK__REDIS_PORT"])), timeout=2).close()
        # nothing of this stack is left: tritonserver runs in a session of its own, so a program that
        # started it must stop it even when stopped during its start-up wait
        left = subprocess.run(["pgrep", "-af", str(work)], capture_output=True, text=True, check=False)
        assert left.stdout == "", left.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)
