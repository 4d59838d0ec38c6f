"""Start and stop a real ``tritonserver`` (the 2.51 binary shipped in ``nvidia-pytriton``) on loopback.

The server lives in its own virtualenv (``make triton`` → ``.venv-triton``) because the wheel needs
numpy<2. Three things make its python backend work outside pytriton:

- a backend directory holding ``python/{libtriton_python.so, triton_python_backend_utils.py,
  triton_python_backend_stub}`` — assembled here from the wheel, with the stub matching the venv's Python;
- ``LD_LIBRARY_PATH`` = the wheel's ``nvidia_pytriton.libs`` + the venv Python's ``LIBDIR`` (else the
  stub loads the system libpython and dies with an RLock error);
- the venv's ``bin`` first on ``PATH`` (else the stub crashes on string inputs).

Used by the tests, ``rampart triton serve`` and ``rampart bench rerank``; production runs the NGC
image instead (deploy/helm).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from services.common.errors import ErrorCode, RampartError
from services.common.fs import tail
from services.common.processes import GroupRecord, OwnedProcess, die_with_parent
from services.rerank.triton_key import server_flags


def _is_ready(url: str) -> bool:
    """True once the server answers 200 on its readiness endpoint (connection refused = not yet)."""
    try:
        return httpx.get(url, timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def _missing_venv(venv: Path, why: str) -> RampartError:
    return RampartError(
        ErrorCode.FAILED_PRECONDITION,
        f"tritonserver venv {venv} {why}; build it with `make triton` "
        "(python3 -m venv .venv-triton && .venv-triton/bin/pip install nvidia-pytriton==0.7.0 'numpy<2' onnxruntime tokenizers)",
        venv=str(venv),
    )


@dataclass(frozen=True)
class TritonInstall:
    """Paths inside the venv that running the binary needs."""

    python: Path
    binary: Path
    backend_lib: Path
    backend_utils: Path
    stub: Path
    libs: Path
    python_libdir: Path

    @classmethod
    def find(cls, venv: Path) -> TritonInstall:
        venv = Path(venv).absolute()
        python = venv / "bin" / "python"
        if not python.exists():
            raise _missing_venv(venv, "does not exist")
        try:
            probe = subprocess.run(
                [
                    str(python),
                    "-c",
                    "import json, sys, sysconfig, site;"
                    "print(json.dumps({'libdir': sysconfig.get_config_var('LIBDIR'),"
                    " 'site': site.getsitepackages()[0], 'ver': f'{sys.version_info[0]}.{sys.version_info[1]}'}))",
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=60,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise _missing_venv(venv, f"has a broken python ({exc})") from exc
        info = json.loads(probe.stdout)
        site_dir = Path(info["site"])
        root = site_dir / "pytriton" / "tritonserver"
        found = cls(
            python=python,
            binary=root / "bin" / "tritonserver",
            backend_lib=root / "backends" / "python" / "libtriton_python.so",
            backend_utils=root / "backends" / "python" / "triton_python_backend_utils.py",
            stub=root / "python_backend_stubs" / info["ver"] / "triton_python_backend_stub",
            libs=site_dir / "nvidia_pytriton.libs",
            python_libdir=Path(info["libdir"]),
        )
        missing = [
            str(p)
            for p in (found.binary, found.backend_lib, found.backend_utils, found.stub)
            if not p.exists()
        ]
        if missing:
            raise _missing_venv(venv, f"lacks {', '.join(missing)} (is nvidia-pytriton==0.7.0 installed?)")
        return found

    def backend_dir(self, dest: Path) -> Path:
        """``dest/python/…`` symlinked to the wheel's backend and the matching stub."""
        py = dest / "python"
        py.mkdir(parents=True, exist_ok=True)
        for src in (self.backend_lib, self.backend_utils, self.stub):
            link = py / src.name
            if link.is_symlink() or link.exists():
                link.unlink()
            link.symlink_to(src)
        return dest

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            [str(self.libs), str(self.python_libdir)]
            + ([env["LD_LIBRARY_PATH"]] if env.get("LD_LIBRARY_PATH") else [])
        )
        env["PATH"] = os.pathsep.join([str(self.python.parent), env.get("PATH", "")])
        env.pop("PYTHONPATH", None)  # the stub must import the venv's numpy, not the caller's
        return env


@dataclass(frozen=True)
class TritonServerTls:
    """TLS on tritonserver's gRPC port: its certificate and key, and with ``ca`` mutual TLS (a client
    certificate of that CA required, ``--grpc-use-ssl-mutual``). HTTP and metrics stay plaintext: the
    kubelet's probes and Prometheus speak no client certificate, and the reranker uses gRPC only."""

    cert: Path
    key: Path
    ca: Path | None = None

    def flags(self) -> list[str]:
        """tritonserver's flags; paths made absolute (it resolves them from its own working folder)."""
        flags = [
            "--grpc-use-ssl=true",
            f"--grpc-server-cert={self.cert.absolute()}",
            f"--grpc-server-key={self.key.absolute()}",
        ]
        if self.ca is not None:
            flags += [f"--grpc-root-cert={self.ca.absolute()}", "--grpc-use-ssl-mutual=true"]
        return flags


@dataclass
class TritonServer(OwnedProcess):
    """A tritonserver process on 127.0.0.1; use as a context manager or call start()/stop()."""

    venv: Path
    repository: Path
    work_dir: Path
    grpc_port: int
    http_port: int
    metrics_port: int
    log_verbose: int = 0
    # every listener on this address only, metrics named explicitly: their default follows
    # --http-address, and 0.0.0.0 in a build without HTTP (they name the models and count requests)
    address: str = "127.0.0.1"
    tls: TritonServerTls | None = None  # gRPC over TLS (mutual with a CA); None: plaintext
    # every API but health requires this key (triton_key); None: open to whoever reaches the ports
    caller_key: str | None = field(default=None, repr=False)
    # killed with its parent (processes.die_with_parent): for a launcher that supervisord may SIGKILL
    die_with_parent: bool = False
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    stop_wait_s: float = field(
        default=30.0, init=False
    )  # SIGTERM: tritonserver ignores SIGINT in the background

    @property
    def grpc_url(self) -> str:
        return f"{self.address}:{self.grpc_port}"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "tritonserver.log"

    def command(self, install: TritonInstall) -> list[str]:
        backends = install.backend_dir(self.work_dir / "backends")
        return [
            str(install.binary),
            f"--model-repository={Path(self.repository).absolute()}",
            f"--backend-directory={backends}",
            f"--http-address={self.address}",
            f"--grpc-address={self.address}",
            f"--metrics-address={self.address}",
            f"--http-port={self.http_port}",
            f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            "--allow-metrics=true",
            f"--log-verbose={self.log_verbose}",
            "--exit-on-error=true",
            "--strict-readiness=true",
            # Unique shared-memory names per server, so parallel servers (and leftovers of a crashed
            # one) never collide in /dev/shm.
            f"--backend-config=python,shm-region-prefix-name=rampart{os.getpid()}p{self.grpc_port}",
            *(self.tls.flags() if self.tls is not None else []),
            *(server_flags(self.caller_key) if self.caller_key else []),
        ]

    @property
    def group_record(self) -> GroupRecord:
        """The last server's process group in this work dir: its stubs share it (comm names are cut at 15
        characters: ``triton_python_b``)."""
        return GroupRecord(self.work_dir / "tritonserver.pgid", ("tritonserver", "triton_python"))

    def start(self, timeout: float = 180.0) -> TritonServer:
        install = TritonInstall.find(self.venv)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.group_record.reap()  # a SIGKILLed predecessor's leftovers (processes.GroupRecord)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            self.command(install),
            env=install.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent if self.die_with_parent else None,  # the CLI sets it: one thread
        )
        log.close()
        self.group_record.write(self.proc.pid)  # its own session: the group id is its pid
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.http_port}/v2/health/ready"
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RampartError(
                    ErrorCode.UNAVAILABLE,
                    f"tritonserver exited with {self.proc.returncode} during start-up; see {self.log_path}:\n"
                    + self.tail_log(),
                )
            if _is_ready(url):
                return self
            time.sleep(0.25)
        self.stop()
        raise RampartError(
            ErrorCode.DEADLINE_EXCEEDED,
            f"tritonserver not ready after {timeout:.0f}s; see {self.log_path}:\n" + self.tail_log(),
        )

    def stop(self) -> None:
        """Stop the server and its group (its stubs), then forget the group."""
        super().stop()
        self.group_record.clear()

    def tail_log(self, lines: int = 30) -> str:
        return tail(self.log_path, lines) or "(no log)"
