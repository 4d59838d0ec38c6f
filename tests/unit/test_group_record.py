"""A launcher's record of its server's process group, and the reaping of a SIGKILLed predecessor's
leftovers (Triton's python-backend stubs outlived their server after `rampart bench faults`)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from services.common.processes import GroupRecord, group_members, pid_alive


def _session_of(binary: Path) -> subprocess.Popen[bytes]:
    """``binary`` (a copy of sleep under another name) as a session leader."""
    return subprocess.Popen([str(binary), "60"], start_new_session=True)


def _named_sleep(tmp_path: Path, name: str) -> Path:
    target = tmp_path / name
    shutil.copy(shutil.which("sleep") or "/bin/sleep", target)
    return target


def _wait_gone(pids: list[int]) -> bool:
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(pid_alive(p) for p in pids)


def test_a_leftover_group_of_the_recorded_names_is_killed(tmp_path: Path) -> None:
    # a shell named tritonserver, in its own session, forking a "stub": its group, as Triton's are
    shell = tmp_path / "tritonserver"
    shutil.copy(shutil.which("bash") or "/bin/bash", shell)
    stub = _named_sleep(tmp_path, "triton_python_backend_stub")
    server = subprocess.Popen([str(shell), "-c", f"{stub} 60 & wait"], start_new_session=True)
    deadline = time.monotonic() + 5
    while len(group_members(server.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    members = group_members(server.pid)
    assert {name for _, name in members} == {"tritonserver", "triton_python_b"}  # comm: 15 characters
    record = GroupRecord(tmp_path / "server.pgid", ("tritonserver", "triton_python"))
    record.write(server.pid)
    assert sorted(record.reap()) == sorted(members)
    server.wait(5)
    assert _wait_gone([pid for pid, _ in members]) and not record.path.exists()
    assert record.reap() == []  # nothing recorded: nothing to do


def test_a_group_with_a_stranger_in_it_is_left_alone(tmp_path: Path) -> None:
    """A recorded id whose group now holds something else (the id was reused) is not killed."""
    other = _session_of(_named_sleep(tmp_path, "postgres"))
    try:
        record = GroupRecord(tmp_path / "server.pgid", ("tritonserver", "triton_python"))
        record.write(other.pid)
        assert record.reap() == []
        assert other.poll() is None and not record.path.exists()
    finally:
        other.kill()
        other.wait(5)


def test_a_stale_or_unreadable_record_is_harmless(tmp_path: Path) -> None:
    record = GroupRecord(tmp_path / "server.pgid", ("tritonserver",))
    record.path.write_text("not a number")
    assert record.reap() == []
    done = subprocess.Popen(["true"], start_new_session=True)
    done.wait(5)
    record.write(done.pid)  # a group that no longer exists
    assert record.reap() == [] and not record.path.exists()
