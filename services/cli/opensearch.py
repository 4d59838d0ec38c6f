"""``rampart opensearch up|down|status``: the local single-node OpenSearch (docs/opensearch.md).

``up`` assembles the node from Maven Central on first use, starts it on 127.0.0.1 with its data under
``opensearch.data_dir``, waits for green and prints what runs; the node outlives the command (pid file)
until ``down``.
"""

from __future__ import annotations

import typer

from services.cli.ui import console, fail, load_settings, out
from services.common.errors import ErrorCode, RampartError
from services.retrieval import opensearch_node as node

opensearch_app = typer.Typer(
    help="The local OpenSearch node (index.backend=opensearch).", no_args_is_help=True
)


def _show(url: str) -> node.NodeInfo:
    try:
        info = node.node_info(url)
    except (OSError, ValueError) as exc:
        raise fail(node.unreachable(url, exc)) from exc
    out.print(f"OpenSearch {info.version} at {url}: {info.status}")
    out.print(f"plugins: {', '.join(info.plugins)}")
    return info


@opensearch_app.command("build")
def opensearch_build() -> None:
    """Assemble the node from Maven Central (cached in ~/.m2) without starting it: `make test` runs
    this first, so the tests' first node start does not also download."""
    try:
        target = node.build(progress=lambda m: console.print(f"• {m}"))
    except RampartError as exc:
        raise fail(exc) from exc
    console.print(f"[green]ready[/green] {target}")


@opensearch_app.command("up")
def opensearch_up() -> None:
    """Start the node (assembling it from Maven Central the first time) and wait for green."""
    settings = load_settings().opensearch
    home = settings.data_dir
    try:
        pid, took = node.start_detached(
            home,
            settings.port,
            settings.heap_mb,
            settings.start_timeout_s,
            progress=lambda m: console.print(f"• {m}"),
        )
    except RampartError as exc:
        if exc.code is ErrorCode.CONFLICT:  # already up: say so and show it
            console.print(exc.message)
            _show(f"http://127.0.0.1:{settings.port}")
            return
        raise fail(exc) from exc
    console.print(f"[green]up[/green] pid {pid}, green after {took:.1f} s; data and log in {home.resolve()}")
    info = _show(f"http://127.0.0.1:{settings.port}")
    if "opensearch-knn" not in info.plugins:
        raise fail(
            RampartError(
                ErrorCode.FAILED_PRECONDITION,
                "the node runs without the opensearch-knn plugin; rebuild it: "
                "rm -rf deploy/opensearch-node/target && rampart opensearch up",
            )
        )


@opensearch_app.command("run")
def opensearch_run() -> None:
    """Run the node in the foreground (what `rampart stack up --index opensearch` supervises): assemble
    it if needed, then become the JVM, so a supervisor's SIGTERM reaches it and it closes its shards."""
    import os

    settings = load_settings().opensearch
    home = settings.data_dir.resolve()
    if (pid := node.running_pid(home)) is not None and pid != os.getpid():
        raise fail(
            RampartError(
                ErrorCode.CONFLICT,
                f"an OpenSearch node already runs from {home} (pid {pid}); stop it with `rampart opensearch "
                "down`, or point RAMPART_OPENSEARCH__URL at it",
            )
        )
    try:
        target = node.build(progress=lambda m: console.print(f"• {m}"))
    except RampartError as exc:
        raise fail(exc) from exc
    home.mkdir(parents=True, exist_ok=True)
    config = node.node_config(home, settings.port, target / "plugins")
    argv = node.java_command(target, config, settings.heap_mb)
    node.pid_file(home).write_text(str(os.getpid()))  # exec keeps the pid: `status` and `down` find it
    console.print(f"OpenSearch on 127.0.0.1:{settings.port}, data in {home}", highlight=False)
    os.execv(argv[0], argv)  # noqa: S606 - our JVM command line, no shell


@opensearch_app.command("down")
def opensearch_down() -> None:
    """Stop the node (SIGTERM: it closes its shards; SIGKILL after 30 s)."""
    home = load_settings().opensearch.data_dir
    pid = node.stop_detached(home)
    console.print(f"stopped pid {pid}" if pid is not None else f"no node runs from {home}")


@opensearch_app.command("status")
def opensearch_status() -> None:
    """Whether the node runs, its health, version and plugins."""
    settings = load_settings().opensearch
    pid = node.running_pid(settings.data_dir)
    out.print(f"pid: {pid if pid is not None else 'none'} ({settings.data_dir})")
    _show(settings.endpoint())
