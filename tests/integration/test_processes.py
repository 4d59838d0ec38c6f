"""Servers Rampart starts from a launcher die with it (services/common/processes.py): a launcher that
supervisord SIGKILLs (``rampart bench faults``) must not leave its server holding the ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.integration

LAUNCHER = """
import subprocess, sys, time
from services.common.processes import die_with_parent
child = subprocess.Popen(["sleep", "120"], start_new_session=True,
                         preexec_fn=die_with_parent if sys.argv[1] == "yes" else None)
print(child.pid, flush=True)
time.sleep(120)
"""


def alive(pid: int) -> bool:
    """Running, not a zombie awaiting its reaper."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def orphan_after_launcher_killed(die: bool) -> int:
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, "yes" if die else "no"], stdout=subprocess.PIPE, text=True
    )
    assert launcher.stdout is not None
    child = int(launcher.stdout.readline())
    assert alive(child)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    return child


def test_a_server_started_to_die_with_its_launcher_goes_when_the_launcher_is_sigkilled() -> None:
    child = orphan_after_launcher_killed(die=True)
    assert not alive(child)


def test_without_it_the_server_outlives_its_launcher() -> None:
    """The control: its own session keeps it out of the launcher's group, so it would run on."""
    child = orphan_after_launcher_killed(die=False)
    try:
        assert alive(child)
    finally:
        os.kill(child, signal.SIGKILL)
