"""The CLI's environment for tests, and ``rampart serve`` as a real process on loopback."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from services.common.net import free_port
from tests.conftest import REPO


def cli_env(data_dir: Path, models_dir: Path) -> dict[str, str]:
    """Settings for a CLI run of its own: private data, the session's built models, quiet logs."""
    return {
        "RAMPART_DATA_DIR": str(data_dir),
        "RAMPART_MODELS_DIR": str(models_dir),
        "RAMPART_LOG_LEVEL": "WARNING",
    }


@contextlib.contextmanager
def rampart_serve(env: dict[str, str], timeout_s: float = 60.0) -> Iterator[str]:
    """``rampart serve`` on a free port with ``env``; yields its base URL once /readyz answers 200."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.cli.main", "serve", "--port", str(port)],
        env={**os.environ, **env},
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            with contextlib.suppress(httpx.TransportError):  # not listening yet
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else "server exited"
            assert time.monotonic() < deadline, f"server not ready in {timeout_s:.0f} s"
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
