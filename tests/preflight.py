"""Refuse to start the suite on a disk too full to hold it.

A full run writes about 2.5 GB under the temporary folder (training checkpoints with optimizer state,
exported ONNX models, indexes) and Ray spills beside them. On a nearly full disk the run used to fail
half-way, as dozens of setup errors whose cause (ENOSPC inside ``torch.save``) was buried in the log;
this check names the folder, the free space and the fix before any test runs.
"""

from __future__ import annotations

import shutil
import tempfile

import pytest

#: What a full run needs free under the temporary folder; measured peak ≈ 2.5 GB, with headroom.
NEEDED_BYTES = 4 * 1024**3


def pytest_sessionstart(session: pytest.Session) -> None:
    folder = tempfile.gettempdir()
    free = shutil.disk_usage(folder).free
    if free < NEEDED_BYTES:
        pytest.exit(
            f"only {free / 1024**3:.1f} GiB free under {folder}; the test suite needs about "
            f"{NEEDED_BYTES / 1024**3:.0f} GiB there. Free some space (old clones, "
            "/tmp/pytest-of-*), or point TMPDIR at a larger disk.",
            returncode=3,
        )
