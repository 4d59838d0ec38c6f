"""Stopping the servers Rampart starts itself (redis-server, Celery workers, tritonserver, test servers).

Each is started with ``start_new_session=True``, so its pid is also its process group: one helper
stops any of them the same way and never leaves a child behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
from abc import ABC, abstractmethod
from pathlib import Path
from types import TracebackType
from typing import Self


def stop_process_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, wait_s: float = 5.0) -> None:
    """Send ``sig`` to ``proc`` (a session leader: a Celery worker then stops its own children); if it
    outlives ``wait_s``, SIGKILL its whole group, and SIGKILL whatever it left behind in the group."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            try:
                proc.send_signal(sig)
                proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
    with contextlib.suppress(ProcessLookupError, PermissionError):  # children the leader left behind
        os.killpg(proc.pid, signal.SIGKILL)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` runs and may still act: a killed process its parent has not reaped yet (a
    zombie) answers signal 0 but will never write again, so it counts as gone. Another user's process
    counts as alive; without ``/proc`` a zombie cannot be told apart and counts as alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


def group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, command name) of the live processes of process group ``pgid``, read from ``/proc`` (empty
    where there is none)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            found.append((int(entry.name), name))
    return found


class GroupRecord:
    """A file naming the process group of a server a launcher starts in its own session, so that the
    launcher's next start can SIGKILL what a SIGKILLed predecessor left: ``die_with_parent`` reaches the
    server, not the children it forked (Triton's python-backend stubs were found alive hours after a
    ``rampart bench faults`` run). Only a group whose every member has a name in ``names`` is killed: a
    recorded id whose group is gone may since name another."""

    def __init__(self, path: Path, names: tuple[str, ...]) -> None:
        self.path, self.names = path, names

    def reap(self) -> list[tuple[int, str]]:
        """SIGKILL the recorded group if it is still there and is what it was; returns its members."""
        try:
            pgid = int(self.path.read_text())
        except (OSError, ValueError):
            return []
        members = group_members(pgid)
        if members and all(name.startswith(self.names) for _, name in members):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        else:
            members = []
        self.path.unlink(missing_ok=True)
        return members

    def write(self, pgid: int) -> None:
        self.path.write_text(str(pgid))

    def clear(self) -> None:
        self.path.unlink(missing_ok=True)


_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """``preexec_fn`` for a server started by a launcher that may itself be SIGKILLed (supervisord's
    ``rampart triton serve``): the kernel SIGKILLs the child when the launcher dies. Its own session
    keeps it out of the launcher's process group, so without this a killed launcher leaves it running
    with the ports its restarted twin needs (seen under ``rampart bench faults``). Linux only; elsewhere
    a no-op, and the launcher's signal handlers still stop it on SIGTERM."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class OwnedProcess(ABC):
    """What every server Rampart starts shares once running: ``proc`` (a session leader), a stop
    that takes its whole group down (SIGTERM, then SIGKILL after ``stop_wait_s``), and use as a
    context manager. Subclasses provide ``start()``, which sets ``proc`` and returns ``self``."""

    proc: subprocess.Popen[bytes] | None = None
    stop_wait_s: float = 5.0

    @abstractmethod
    def start(self) -> Self:
        """Launch the process (a session leader), set ``proc``, wait until it serves; return self."""

    def stop(self) -> None:
        """SIGTERM, then SIGKILL of the group after ``stop_wait_s``; a no-op when not running."""
        proc, self.proc = self.proc, None
        if proc is not None:
            stop_process_group(proc, signal.SIGTERM, self.stop_wait_s)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
