"""Filesystem steps shared by everything that installs a folder (models, repositories, checkpoints)."""

from __future__ import annotations

import shutil
from pathlib import Path


def swap_dir(new: Path, dest: Path) -> Path:
    """Put the finished folder ``new`` at ``dest``, replacing what was there.

    The old folder is renamed aside first and removed last, so ``dest`` is never half-written: a
    reader sees the old tree or the new one (a crash in between leaves ``dest.old`` to clean up).
    """
    old = dest.with_name(dest.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if dest.exists():
        dest.rename(old)
    new.rename(dest)
    shutil.rmtree(old, ignore_errors=True)
    return dest


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` of a log file; empty when there is none yet."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""
