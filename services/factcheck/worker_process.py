"""Start and stop a real ``rampart worker`` (fact-check Celery worker) as a child process.

``rampart bench factcheck`` and the integration tests both need a worker that is *ready* — consuming
the queue with the model loaded in every pool process — before they time or judge anything, and
gone afterwards, prefork children included. The worker runs in its own session, so a Ctrl-C in the
terminal reaches only the caller, which stops the worker (warm shutdown, then SIGKILL of the group).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

from celery import Celery

import services
from services.common.errors import ErrorCode, RampartError
from services.common.processes import OwnedProcess

# What the worker logs once per pool process when its model is loaded (celery_app.WorkerState).
LOADED = "loaded embedder"
LOAD_FAILED = "could not load the embedding model"


def worker_command() -> list[str]:
    """``rampart`` next to this interpreter (what operators run), else ``python -m`` the CLI."""
    script = Path(sys.executable).with_name("rampart")
    if script.exists():
        return [str(script), "worker"]
    return [sys.executable, "-m", "services.cli.main", "worker"]


class WorkerProcess(OwnedProcess):
    """``rampart worker`` (prefork, ``concurrency`` processes) on ``broker_url``/``result_backend``.

    ``inherit_env``: pass the caller's ``RAMPART_*`` variables on (the bench: the worker must load
    what the caller loads); off, the worker sees only what is given here (the tests: hermetic).
    ``env`` overrides everything else. The log level is INFO because readiness is read from the log.
    """

    stop_wait_s = 10.0  # SIGTERM is a warm shutdown: running tasks finish first

    def __init__(
        self,
        *,
        broker_url: str,
        result_backend: str,
        models_dir: Path,
        work: Path,
        concurrency: int = 1,
        hostname: str | None = None,
        env: Mapping[str, str] | None = None,
        inherit_env: bool = False,
    ) -> None:
        self.broker_url = broker_url
        self.result_backend = result_backend
        self.models_dir = models_dir
        self.work = work
        self.concurrency = concurrency
        self.hostname = hostname or f"rampart-worker-{uuid.uuid4().hex[:8]}@localhost"
        self.extra_env = dict(env or {})
        self.inherit_env = inherit_env
        self.proc: subprocess.Popen[bytes] | None = None
        work.mkdir(parents=True, exist_ok=True)
        self.log_path = work / f"{self.hostname.split('@')[0]}.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if self.inherit_env or not k.startswith("RAMPART_")}
        root = str(Path(services.__file__).resolve().parent.parent)  # for `python -m services…`
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        env.update(
            RAMPART_FACTCHECK__CELERY__BROKER_URL=self.broker_url,
            RAMPART_FACTCHECK__CELERY__RESULT_BACKEND=self.result_backend,
            RAMPART_MODELS_DIR=str(self.models_dir),
            RAMPART_LOG_LEVEL="INFO",
        )
        env.update(self.extra_env)
        return env

    def start(self, timeout_s: float = 60.0) -> WorkerProcess:
        """Start the worker; return once it answers a ping and every pool process has loaded the
        model (so the first timed task is not the slow one). Raise ``RampartError`` with the log's
        tail if it does not within ``timeout_s``. On any failure, including Ctrl-C, nothing is left."""
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(  # noqa: S603  # argument list of a resolved binary, no shell
                [*worker_command(), "--concurrency", str(self.concurrency), "--hostname", self.hostname],
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            self._wait_ready(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _probe(self) -> Celery:
        """A bare client app for control pings: fails fast, registers nothing."""
        app = Celery("rampart-worker-probe", broker=self.broker_url, set_as_current=False)
        app.conf.update(
            broker_connection_retry_on_startup=True,
            broker_transport_options={"socket_connect_timeout": 2.0, "socket_timeout": 5.0, "max_retries": 1},
        )
        return app

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.proc is not None
        end = time.monotonic() + timeout_s
        app = self._probe()
        try:
            while not app.control.ping(destination=[self.hostname], timeout=0.3):
                self._check_alive(end, "did not answer ping")
            while self.log().count(LOADED) < self.concurrency:
                if LOAD_FAILED in self.log():
                    raise self._error("could not load the embedding model")
                self._check_alive(end, "did not load the model")
                time.sleep(0.02)
        finally:
            app.close()

    def _check_alive(self, end: float, what: str) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise self._error(f"exited with {self.proc.returncode} during start-up")
        if time.monotonic() > end:
            raise self._error(what)

    def _error(self, what: str) -> RampartError:
        return RampartError(
            ErrorCode.UNAVAILABLE,
            f"rampart worker {self.hostname} {what}; see {self.log_path}:\n{self.log()[-3000:]}",
        )

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def children(self) -> list[int]:
        """PIDs of the prefork pool processes (empty once stopped)."""
        if self.proc is None:
            return []
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        try:
            return [int(p) for p in path.read_text().split()]
        except OSError:
            return []
