"""``rampart stack up|down|status``: every distributed service on 127.0.0.1 under supervisord."""

from __future__ import annotations

import json
import signal
import threading
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from services.cli.ui import console, fail, load_settings
from services.common.errors import RampartError
from services.common.settings import RampartSettings

stack_app = typer.Typer(
    help="Run the distributed stack on this machine (docs/stack.md)", no_args_is_help=True
)


class IndexBackend(StrEnum):
    embedded = "embedded"
    opensearch = "opensearch"


def with_options(
    settings: RampartSettings, index: IndexBackend | None, replicas: int | None
) -> RampartSettings:
    """``--index``/``--replicas`` over the settings (RAMPART_INDEX__BACKEND, RAMPART_STACK__REPLICAS);
    every program then gets them through the stack's environment."""
    update: dict[str, object] = {}
    if index is not None:
        update["index"] = settings.index.model_copy(update={"backend": index.value})
    if replicas is not None:
        update["stack"] = settings.stack.model_copy(update={"replicas": replicas})
    return settings.model_copy(update=update) if update else settings


@stack_app.command("up")
def up(
    detach: Annotated[
        bool, typer.Option(help="Return once ready; stop later with `rampart stack down`")
    ] = False,
    index: Annotated[
        IndexBackend | None,
        typer.Option(
            help="Index backend (default: index.backend); opensearch starts a node unless "
            "RAMPART_OPENSEARCH__URL names one"
        ),
    ] = None,
    replicas: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=16,
            help="Retrieval replicas, ingest workers and pipeline replicas (default: stack.replicas); "
            ">1 needs --index opensearch",
        ),
    ] = None,
) -> None:
    """Start redis, Triton, (OpenSearch,) retrieval, ingest, fact-check workers, the Ray Serve
    orchestrator and the gateway; wait until each is ready. Without --detach, Ctrl-C stops everything."""
    from services.stack.control import start_stack, stop_stack
    from services.stack.plan import Addresses

    settings = with_options(load_settings(), index, replicas)
    logs = settings.stack_dir().resolve()
    console.print(f"starting the stack (logs: {logs / 'logs'}) …")
    try:
        proc, sup = start_stack(settings, Path.cwd(), log=logs / "supervisord.out" if detach else None)
    except RampartError as exc:
        raise fail(exc) from exc
    except KeyboardInterrupt:
        raise typer.Exit(code=130) from None
    console.print(
        f"[green]stack ready[/green]: gateway {Addresses.of(settings).gateway_url} (OpenAPI: /docs); "
        f"index {settings.index.backend}, {settings.stack.replicas} replica(s) of retrieval, ingest and "
        "the pipeline"
    )
    if detach:
        return
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.is_set() and proc.poll() is None:
        stop.wait(1.0)
    console.print("stopping the stack …")
    stop_stack(proc, sup)
    console.print("stack stopped")


@stack_app.command("down")
def down() -> None:
    """Stop a stack started with `rampart stack up --detach` (reverse start order)."""
    from services.stack.control import Supervisor

    sup = Supervisor(load_settings().stack_dir().resolve())
    if not sup.running():
        console.print("no stack is running")
        return
    sup.shutdown()
    console.print("stack stopped")


@stack_app.command("status")
def status(as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output")] = False) -> None:
    """Each program's state (supervisord)."""
    from services.stack.control import Supervisor

    sup = Supervisor(load_settings().stack_dir().resolve())
    if not sup.running():
        console.print("no stack is running")
        raise typer.Exit(code=1)
    states = sup.states()
    if as_json:
        print(json.dumps([s.__dict__ for s in states]))
        return
    table = Table("program", "state", "pid", "detail")
    for s in states:
        table.add_row(s.name, s.state, str(s.pid), s.description)
    console.print(table)
