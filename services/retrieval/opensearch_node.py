"""A single-node OpenSearch 2.19 on loopback, assembled from Maven Central (docs/opensearch.md).

No OpenSearch comes from PyPI or Debian, and no distribution tarball is reachable; Maven Central has
the server, its modules and the k-NN plugin. ``deploy/opensearch-node`` is a small Maven project
that lays them out (``mvn package``, cached in ``~/.m2``) and a Java main that starts the node.

Used by ``rampart opensearch up|down|status`` (a node that outlives the command, with a pid file) and
by the integration tests (a node owned by the test session, on a free port, in a tmp folder). Both
write the same config, so tests run the node users run. Security is off: the node binds 127.0.0.1
only, and OpenSearch applies its production bootstrap checks only to non-loopback addresses.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from services.common.errors import ErrorCode, RampartError
from services.common.processes import OwnedProcess

PROJECT = Path(__file__).resolve().parents[2] / "deploy" / "opensearch-node"
MAIN_CLASS = "rampart.opensearch.NodeMain"
UP_HINT = "`rampart opensearch up` (or `make opensearch`)"
# what the build stamp covers: a change to any of these rebuilds the layout
_BUILD_INPUTS = ("pom.xml", "src", "plugins")
_LOG4J = """status = error
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d{ISO8601}][%-5p][%-25c{1.}] %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
"""


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"`{name}` is not on PATH; the OpenSearch node needs Java 17 and Maven "
            "(apt-get install openjdk-17-jre-headless maven)",
            tool=name,
        )
    return found


def _inputs_digest(project: Path) -> str:
    h = hashlib.sha256()
    for name in _BUILD_INPUTS:
        root = project / name
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for f in files:
            h.update(str(f.relative_to(project)).encode())
            h.update(f.read_bytes())
    return h.hexdigest()


def build(project: Path = PROJECT, progress: Callable[[str], None] | None = None) -> Path:
    """Resolve the artifacts and lay out ``target/`` (lib/, plugins/, classes/) unless that layout
    is current; return ``target/``. The first run downloads ~60 MB into ``~/.m2``; later runs are
    offline. Raise naming Maven's output when it fails."""
    target = project / "target"
    stamp = target / ".rampart-built"
    digest = _inputs_digest(project)
    if stamp.exists() and stamp.read_text() == digest:
        return target
    mvn = _tool("mvn")
    _tool("java")
    if progress is not None:
        progress("assembling OpenSearch 2.19.1 + k-NN from Maven Central (first run: ~60 MB into ~/.m2)")
    # clean: the dependency plugin's unpack markers would otherwise skip a plugin folder removed by hand
    proc = subprocess.run(  # noqa: S603  # fixed argument list, no shell
        [mvn, "-q", "-B", "-f", str(project / "pom.xml"), "clean", "package"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"Maven could not assemble the OpenSearch node (mvn exited {proc.returncode}); its output:\n"
            f"{(proc.stdout + proc.stderr)[-3000:]}",
        )
    stamp.write_text(digest)
    return target


def node_config(
    home: Path, port: int, plugins: Path, *, cluster: str = "rampart", node: str = "rampart-1"
) -> Path:
    """Write ``home/config`` (opensearch.yml, log4j2.properties) and link ``home/plugins``; return the
    config folder. ``transport.port: 0``: a single node needs no fixed transport port, so two nodes
    (the user's and a test's) never collide on it."""
    config = home / "config"
    config.mkdir(parents=True, exist_ok=True)
    settings = {
        "cluster.name": cluster,
        "node.name": node,
        "path.home": str(home),
        "path.data": str(home / "data"),
        "path.logs": str(home / "logs"),
        "network.host": "127.0.0.1",
        "http.port": port,
        "transport.port": 0,
        "discovery.type": "single-node",
        # one node has nowhere to put replicas: new indexes must not wait for them to turn green
        "cluster.routing.allocation.disk.threshold_enabled": False,
    }
    (config / "opensearch.yml").write_text("".join(f"{k}: {json.dumps(v)}\n" for k, v in settings.items()))
    (config / "log4j2.properties").write_text(_LOG4J)
    link = home / "plugins"
    if (link.is_symlink() or link.exists()) and link.resolve() != plugins.resolve():
        link.unlink()
    if not link.exists():
        link.symlink_to(plugins.resolve(), target_is_directory=True)
    return config


def java_command(target: Path, config: Path, heap_mb: int) -> list[str]:
    return [
        _tool("java"),
        f"-Xms{heap_mb}m",
        f"-Xmx{heap_mb}m",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        "-Dfile.encoding=UTF-8",
        "-Dlog4j2.disable.jmx=true",
        "-Dlog4j.shutdownHookEnabled=false",
        "-cp",
        f"{target / 'lib'}/*{os.pathsep}{target / 'classes'}",
        MAIN_CLASS,
        str(config),
    ]


@dataclass(frozen=True)
class NodeInfo:
    version: str
    plugins: list[str]
    status: str


def get_json(url: str, timeout_s: float = 5.0) -> object:
    with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310  # http(s) URL from settings
        return json.loads(resp.read())


def node_info(url: str) -> NodeInfo:
    """Version, plugin names and cluster health of the node at ``url`` (raises ``OSError`` if down)."""
    root = get_json(url)
    plugins = get_json(f"{url}/_cat/plugins?format=json")
    health = get_json(f"{url}/_cluster/health")
    assert isinstance(root, dict) and isinstance(plugins, list) and isinstance(health, dict)
    return NodeInfo(
        version=str(root["version"]["number"]),
        plugins=sorted({str(p["component"]) for p in plugins}),
        status=str(health["status"]),
    )


def wait_green(url: str, timeout_s: float, alive: subprocess.Popen[bytes] | None, log: Path) -> float:
    """Poll ``url`` until the cluster is green; return the seconds waited. Raise with the log's tail
    if the process exits or the time runs out."""
    start = time.monotonic()
    while True:
        with contextlib.suppress(OSError, ValueError):
            health = get_json(f"{url}/_cluster/health?wait_for_status=green&timeout=1s", timeout_s=3)
            if isinstance(health, dict) and health.get("status") == "green":
                return time.monotonic() - start
        exited = alive is not None and alive.poll() is not None
        if exited or time.monotonic() - start > timeout_s:
            what = "exited" if exited else f"did not turn green within {timeout_s:.0f} s"
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"the OpenSearch node at {url} {what}; its log ({log}) ends:\n{tail(log)}",
                url=url,
            )
        time.sleep(0.25)


def tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return "(no log)"


class OpenSearchNode(OwnedProcess):
    """A node owned by this process (the tests'): started in ``home``, stopped with it."""

    stop_wait_s = 30.0

    def __init__(self, home: Path, port: int, heap_mb: int = 512, timeout_s: float = 180.0) -> None:
        self.home = home
        self.port = port
        self.heap_mb = heap_mb
        self.timeout_s = timeout_s
        self.startup_s = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.home / "node.log"

    def start(self) -> OpenSearchNode:
        target = build()
        config = node_config(self.home, self.port, target / "plugins", node=f"rampart-{self.port}")
        begin = time.monotonic()
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(  # noqa: S603  # argument list, no shell
                java_command(target, config, self.heap_mb),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            wait_green(self.url, self.timeout_s, self.proc, self.log_path)
        except BaseException:
            self.stop()
            raise
        self.startup_s = time.monotonic() - begin
        return self


# ---- the user's node (`rampart opensearch up|down|status`): outlives the command, found by pid file ----
def pid_file(home: Path) -> Path:
    return home / "node.pid"


def running_pid(home: Path) -> int | None:
    """The pid in ``home``'s pid file if that process still runs (a stale file is removed)."""
    path = pid_file(home)
    try:
        pid = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        path.unlink(missing_ok=True)
        return None
    except PermissionError:
        return pid  # it runs, under another user: still the node this pid file names
    return pid


def start_detached(
    home: Path, port: int, heap_mb: int, timeout_s: float, progress: Callable[[str], None] | None = None
) -> tuple[int, float]:
    """Start the node in ``home`` in its own session (it survives the command); return its pid and
    the seconds it took to turn green. Refuses when the pid file names a running node."""
    home.mkdir(parents=True, exist_ok=True)
    home = home.resolve()
    if (pid := running_pid(home)) is not None:
        raise RampartError(
            ErrorCode.CONFLICT,
            f"an OpenSearch node already runs from {home} (pid {pid}); `rampart opensearch status` "
            "shows it, `rampart opensearch down` stops it",
            pid=pid,
        )
    target = build(progress=progress)
    config = node_config(home, port, target / "plugins")
    log_path = home / "node.log"
    begin = time.monotonic()
    with log_path.open("ab") as log:
        proc = subprocess.Popen(  # noqa: S603  # argument list, no shell
            java_command(target, config, heap_mb),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    pid_file(home).write_text(str(proc.pid))
    try:
        wait_green(f"http://127.0.0.1:{port}", timeout_s, proc, log_path)
    except BaseException:
        stop_detached(home)
        raise
    return proc.pid, time.monotonic() - begin


def stop_detached(home: Path, wait_s: float = 30.0) -> int | None:
    """SIGTERM the node of ``home`` (it closes its shards), SIGKILL after ``wait_s``; return its pid,
    or ``None`` if none ran."""
    pid = running_pid(home)
    if pid is None:
        return None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    end = time.monotonic() + wait_s
    while time.monotonic() < end:
        with contextlib.suppress(ChildProcessError):  # reap it when this process started it
            os.waitpid(pid, os.WNOHANG)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    pid_file(home).unlink(missing_ok=True)
    return pid


def unreachable(url: str, exc: BaseException) -> RampartError:
    """The error every caller gives when no node answers at ``url``."""
    return RampartError(
        ErrorCode.UNAVAILABLE,
        f"OpenSearch at {url} is unreachable ({type(exc).__name__}); start the local node with {UP_HINT}, "
        "or point RAMPART_OPENSEARCH__URL at a running one",
        url=url,
    )
