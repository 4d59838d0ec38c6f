"""Start, watch and stop a stack's supervisord through its XML-RPC interface (a 0700 unix socket)."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import xmlrpc.client
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from services.common.dev_certs import SERVICE_NAMES, make_dev_certs
from services.common.errors import ErrorCode, RampartError
from services.common.fs import tail
from services.common.settings import RampartSettings
from services.stack.plan import (
    StackSecrets,
    certs,
    programs,
    ray_token_path,
    redis_acl_path,
    stack_env,
    triton_tls,
    worker_metrics_dir,
)
from services.stack.supervisor_conf import render, socket_path

# supervisord process states (supervisor.states.ProcessStates) that readiness reads
RUNNING, FATAL = "RUNNING", "FATAL"


@dataclass(frozen=True)
class ProgramState:
    name: str
    state: str
    pid: int
    description: str


class Supervisor:
    """A handle on one stack's supervisord (running or not)."""

    def __init__(self, stack_dir: Path) -> None:
        self.dir = stack_dir

    def _rpc(self) -> Any:
        from supervisor.xmlrpc import SupervisorTransport  # type: ignore[import-untyped]

        transport = SupervisorTransport(None, None, f"unix://{socket_path(self.dir)}")
        return xmlrpc.client.ServerProxy("http://127.0.0.1", transport=transport)

    def pid(self) -> int | None:
        """supervisord's pid when it is alive."""
        try:
            pid = int((self.dir / "supervisord.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            os.kill(pid, 0)  # PermissionError: alive, under another user
        except ProcessLookupError:
            return None
        except PermissionError:
            return pid
        return pid

    def running(self) -> bool:
        return self.pid() is not None and socket_path(self.dir).exists()

    def states(self) -> list[ProgramState]:
        infos = cast(list[dict[str, Any]], self._rpc().supervisor.getAllProcessInfo())
        return [ProgramState(i["name"], i["statename"], int(i["pid"]), i["description"]) for i in infos]

    def stop_program(self, name: str) -> None:
        self._rpc().supervisor.stopProcess(name, True)

    def start_program(self, name: str) -> None:
        self._rpc().supervisor.startProcess(name, True)

    def kill_program(self, name: str, sig: signal.Signals = signal.SIGKILL) -> int:
        """Kill a program's process group the hard way (a crash); supervisord restarts it."""
        state = next((s for s in self.states() if s.name == name), None)
        if state is None or state.pid <= 0:
            raise RampartError(ErrorCode.NOT_FOUND, f"program {name!r} is not running")
        with contextlib.suppress(ProcessLookupError):
            os.killpg(state.pid, sig)
        return state.pid

    def log_tail(self, name: str, lines: int = 30) -> str:
        """The end of a program's log (``supervisord``: supervisord's own)."""
        if name == "supervisord":
            return tail(self.dir / "supervisord.log", lines)
        return tail(self.dir / "logs" / f"{name}.log", lines)

    def shutdown(self, timeout_s: float = 120.0) -> None:
        """Stop every program (reverse priority) and supervisord. After ``timeout_s`` a hung supervisord
        is SIGKILLed with every program's process group (supervisord gives each its own group)."""
        pid = self.pid()
        if pid is None:
            return
        groups: list[int] = []
        with contextlib.suppress(OSError, xmlrpc.client.Fault):
            groups = [s.pid for s in self.states() if s.pid > 0]
        with contextlib.suppress(OSError, xmlrpc.client.Fault):
            self._rpc().supervisor.shutdown()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and self.pid() is not None:
            time.sleep(0.2)
        if self.pid() is not None:
            for group in [pid, *groups]:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(group, signal.SIGKILL)

    def startup_report(self, lines: int = 15) -> str:
        """supervisord's log tail and each program's state and log tail: what a failed start shows."""
        states = self.states() if self.running() else []
        return "\n".join(
            [f"--- supervisord ---\n{self.log_tail('supervisord', lines)}"]
            + [f"--- {p.name} ({p.state}) ---\n{self.log_tail(p.name, lines)}" for p in states]
        )


def write_config(settings: RampartSettings, workdir: Path) -> Path:
    stack_dir = settings.stack_dir().resolve()
    (stack_dir / "logs").mkdir(parents=True, exist_ok=True)
    stack_dir.chmod(0o700)
    metrics = worker_metrics_dir(settings)  # multiprocess metrics start empty with each stack
    shutil.rmtree(metrics, ignore_errors=True)
    metrics.mkdir()
    conf = stack_dir / "supervisord.conf"
    conf.write_text(render(programs(settings), stack_dir, workdir=workdir))
    return conf


def write_secrets(settings: RampartSettings, stack_secrets: StackSecrets) -> None:
    """This start's credential files in the stack's 700 folder: the CA and certificates, the Redis ACL
    (hashed passwords), Ray's token (mode 600, created so: Ray's own ~/.ray/auth_token is 644)."""
    made = certs(settings)
    if made is not None:
        extra = (
            *(("redis",) if settings.stack.redis_tls else ()),
            *(("triton",) if triton_tls(settings) else ()),
        )
        make_dev_certs(made.dir, (*SERVICE_NAMES, *extra))
    if stack_secrets.redis is not None:
        stack_secrets.redis.write_acl(redis_acl_path(settings))
    if stack_secrets.ray_token is not None:
        path = ray_token_path(settings)
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(stack_secrets.ray_token)


def internal_token(settings: RampartSettings) -> str:
    """The token every program of the stack shares (``remote.internal_token``): the user's, or a fresh
    one per start."""
    given = settings.remote.internal_token
    return given.get_secret_value() if given else secrets.token_urlsafe(32)


def launch(
    settings: RampartSettings, *, workdir: Path, log: Path | None = None, token: str | None = None
) -> subprocess.Popen[bytes]:
    """Start supervisord (foreground mode, as a session leader) with the stack's environment; ``token``:
    the stack's internal token (default: :func:`internal_token`)."""
    sup = Supervisor(settings.stack_dir().resolve())
    if sup.running():
        raise RampartError(
            ErrorCode.CONFLICT,
            f"a stack is already running from {sup.dir} (pid {sup.pid()}); stop it with `rampart stack down`",
        )
    conf = write_config(settings, workdir)
    stack_secrets = StackSecrets.fresh(settings, token or internal_token(settings))
    write_secrets(settings, stack_secrets)
    env = {**os.environ, **stack_env(settings, stack_secrets)}
    binary = Path(sys.executable).with_name("supervisord")
    with log.open("ab") if log is not None else contextlib.nullcontext(subprocess.DEVNULL) as out:
        return subprocess.Popen(  # noqa: S603 - our own venv's supervisord, argument list
            [str(binary), "-c", str(conf)],
            cwd=workdir,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def start_stack(
    settings: RampartSettings, workdir: Path, *, log: Path | None = None
) -> tuple[subprocess.Popen[bytes], Supervisor]:
    """Launch the stack and wait until every stage is ready (``stack.ready_timeout_s``). On failure
    (or Ctrl-C) everything started is stopped again, and the error carries
    :meth:`Supervisor.startup_report` so the cause is in the message, not only in the logs."""
    from services.stack.plan import Addresses
    from services.stack.readiness import expected_stages, wait_ready

    token = internal_token(settings)
    proc = launch(settings, workdir=workdir, log=log, token=token)
    sup = Supervisor(settings.stack_dir().resolve())
    try:
        wait_ready(
            sup,
            Addresses.of(settings).gateway_url,
            expected_stages(settings),
            settings.stack.ready_timeout_s,
            token=token,
        )
    except RampartError as exc:
        try:
            report = sup.startup_report()
        except Exception as why:  # the report is a courtesy; the shutdown is not
            report = f"(no start-up report: {why})"
        finally:
            stop_stack(proc, sup)
        raise RampartError(exc.code, f"{exc.message}\n{report}", **exc.details) from exc
    except BaseException:
        stop_stack(proc, sup)
        raise
    return proc, sup


def stop_stack(proc: subprocess.Popen[bytes], sup: Supervisor) -> None:
    """Stop every program (reverse start order), then supervisord itself."""
    sup.shutdown()
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


@contextlib.contextmanager
def running_stack(
    settings: RampartSettings, workdir: Path, *, log: Path | None = None
) -> Iterator[Supervisor]:
    """:func:`start_stack`, yield its handle, always :func:`stop_stack`."""
    proc, sup = start_stack(settings, workdir, log=log)
    try:
        yield sup
    finally:
        stop_stack(proc, sup)
