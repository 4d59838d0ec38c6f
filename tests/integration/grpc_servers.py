"""Real gRPC servers for tests: in-process (a loop in a thread) or a ``python -m`` child process.

Generic on purpose (the retrieval, ingest and orchestrator tests share it):

- :class:`BackgroundLoop` runs coroutines (a ``grpc.aio`` server's start/stop) on an event loop in a
  daemon thread, so synchronous tests and clients can talk to an in-process server.
- :class:`GrpcServiceProcess` starts ``python -m <module>`` with an environment, waits until the
  health service reports ``service`` SERVING, and stops it like every other owned process (SIGTERM,
  then SIGKILL of its group). A start that fails shows the child's log in the test failure.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from services.common.grpc_client import check_ready, open_channel
from services.common.net import free_port
from services.common.processes import OwnedProcess
from services.common.service_auth import ServiceAuth

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


class BackgroundLoop:
    """An asyncio event loop in a daemon thread; :meth:`run` a coroutine on it and wait for the result."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="grpc-test-loop", daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()


def hermetic_env(extra: Mapping[str, str]) -> dict[str, str]:
    """The caller's environment without ``RAMPART_*`` (tests say what they mean), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAMPART_")}
    paths = (str(REPO), str(REPO / "proto" / "gen"), env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env.update(extra)
    return env


class GrpcServiceProcess(OwnedProcess):
    """``python -m module`` serving gRPC on 127.0.0.1:``port``; started = health says SERVING.

    ``env`` must make the module listen on ``port`` (e.g. ``RAMPART_RETRIEVAL_SERVICE__PORT``).
    """

    stop_wait_s = 15.0
    # the credentials the readiness probe and :meth:`channel` use (a server with mTLS refuses others)
    probe_auth: ServiceAuth | None = None

    def __init__(
        self,
        module: str,
        env: Mapping[str, str],
        *,
        port: int,
        log_path: Path,
        service: str = "",
        ready_timeout_s: float = 90.0,
    ) -> None:
        self.module = module
        self.env = dict(env)
        self.port = port
        self.log_path = log_path
        self.service = service
        self.ready_timeout_s = ready_timeout_s

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> GrpcServiceProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", self.module],
                env=hermetic_env(self.env),
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        channel = open_channel(self.address, auth=self.probe_auth)
        try:
            end = time.monotonic() + self.ready_timeout_s
            while not check_ready(channel, self.service, timeout_s=1.0):
                if self.proc.poll() is not None or time.monotonic() > end:
                    self.stop()
                    pytest.fail(f"{self.module} did not become ready on {self.address}:\n{self.log()}")
                time.sleep(0.2)
        finally:
            channel.close()
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else "(no log)"

    def channel(self) -> grpc.Channel:
        return open_channel(self.address, auth=self.probe_auth)


class RetrievalServiceProcess(GrpcServiceProcess):
    """``python -m services.retrieval.server`` over ``data_dir`` with the session's models."""

    def __init__(self, data_dir: Path, models_dir: Path, *, port: int | None = None, **env: str) -> None:
        port = port or free_port()
        super().__init__(
            "services.retrieval.server",
            {
                "RAMPART_DATA_DIR": str(data_dir),
                "RAMPART_MODELS_DIR": str(models_dir),
                "RAMPART_RETRIEVAL_SERVICE__HOST": "127.0.0.1",
                "RAMPART_RETRIEVAL_SERVICE__PORT": str(port),
                "RAMPART_RETRIEVAL_SERVICE__METRICS_PORT": "0",
                "RAMPART_EMBEDDING__THREADS": "1",
                "RAMPART_LOG_LEVEL": "INFO",
                **env,
            },
            port=port,
            log_path=data_dir.parent / f"retrieval-{port}.log",
            service="rampart.retrieval.v1.RetrievalService",
        )
