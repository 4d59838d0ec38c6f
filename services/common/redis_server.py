"""A throwaway ``redis-server`` (Debian's binary) on loopback, owned by the process that starts it.

Used by ``rampart bench factcheck`` and by the integration tests, so both exercise the fact-checker
against a real Redis started the same way. The server runs in the foreground as a child of the
caller (never daemonized, persistence off, its files in ``work``) and in its own session, so a Ctrl-C
in the terminal reaches the caller only: the caller decides when to stop it, and always does.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from pathlib import Path

import redis

from services.common.errors import ErrorCode, RampartError
from services.common.net import free_port
from services.common.processes import OwnedProcess

INSTALL_HINT = "apt-get install redis-server (`make system-deps` does it)"


def redis_command(binary: Path, port: int) -> list[str]:
    """``redis-server`` on 127.0.0.1:``port`` with persistence off (a broker, result store and cache
    whose contents may be lost: tasks expire, evidence is recomputed)."""
    return [str(binary), "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"]


def redis_server_binary() -> Path | None:
    """The ``redis-server`` to run, or ``None`` when it is not installed."""
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    debian = Path("/usr/bin/redis-server")  # PATH may be minimal under sudo or cron
    return debian if debian.exists() else None


class RedisServer(OwnedProcess):
    """``redis-server`` on 127.0.0.1 with persistence off; restartable on the same port (the tests
    restart it to check that clients reconnect)."""

    def __init__(self, work: Path, port: int | None = None, binary: Path | None = None) -> None:
        self.work = work
        self.port = port or free_port()
        self.binary = binary
        self.proc: subprocess.Popen[bytes] | None = None
        work.mkdir(parents=True, exist_ok=True)

    @property
    def log_path(self) -> Path:
        return self.work / "redis.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def client(self, db: int = 0) -> redis.Redis:
        return redis.Redis.from_url(self.url(db), socket_connect_timeout=1, socket_timeout=2)

    def command(self, binary: Path) -> list[str]:
        return [*redis_command(binary, self.port), "--dir", str(self.work)]

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        """Start the server and return once it answers PING; raise ``RampartError`` (with the log's
        tail) if it cannot. Whatever happens meanwhile, including Ctrl-C, leaves no process behind."""
        binary = self.binary or redis_server_binary()
        if binary is None or not binary.exists():
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION, f"redis-server is not installed; install it: {INSTALL_HINT}"
            )
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(  # noqa: S603  # argument list of a resolved binary, no shell
                self.command(binary),
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

    def _wait_ready(self, timeout_s: float) -> None:
        assert self.proc is not None
        client = self.client()
        try:
            end = time.monotonic() + timeout_s
            while True:
                with contextlib.suppress(redis.RedisError):  # not listening yet
                    if client.ping():
                        return
                if self.proc.poll() is not None or time.monotonic() > end:
                    raise RampartError(
                        ErrorCode.UNAVAILABLE,
                        f"redis-server on port {self.port} did not answer PING:\n{self.tail_log()}",
                        port=self.port,
                    )
                time.sleep(0.02)
        finally:
            client.close()

    def tail_log(self, chars: int = 2000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"
