"""Servers Rampart starts from a launcher die with it (services/common/processes.py): a launcher that
supervisord SIGKILLs (``rampart bench faults``) must not leave its server holding the ports."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from services.common.processes import pid_alive

pytestmark = pytest.mark.integration

LAUNCHER = """
import subprocess, sys, time
from services.common.processes import die_with_parent
child = subprocess.Popen(["sleep", "120"], start_new_session=True,
                         preexec_fn=die_with_parent if sys.argv[1] == "yes" else None)
print(child.pid, flush=True)
time.sleep(120)
"""


def orphan_after_launcher_killed(die: bool, wait_s: float) -> int:
    """Start a launcher whose child runs in its own session, SIGKILL the launcher, wait up to
    ``wait_s`` for the child to go; the child's pid."""
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, "yes" if die else "no"], stdout=subprocess.PIPE, text=True
    )
    assert launcher.stdout is not None
    child = int(launcher.stdout.readline())
    assert pid_alive(child)
    launcher.send_signal(signal.SIGKILL)
    launcher.wait()
    deadline = time.monotonic() + wait_s
    while pid_alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    return child


def test_a_server_started_to_die_with_its_launcher_goes_when_the_launcher_is_sigkilled() -> None:
    child = orphan_after_launcher_killed(die=True, wait_s=5.0)
    assert not pid_alive(child)


def test_without_it_the_server_outlives_its_launcher() -> None:
    """The control: its own session keeps it out of the launcher's group, so it would run on."""
    child = orphan_after_launcher_killed(die=False, wait_s=0.5)
    try:
        assert pid_alive(child)
    finally:
        os.kill(child, signal.SIGKILL)
