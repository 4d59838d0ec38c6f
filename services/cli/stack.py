"""``rampart stack up|down|status``: every distributed service on 127.0.0.1 under supervisord."""

from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from services.cli.ui import console, fail, load_settings
from services.common.errors import RampartError

stack_app = typer.Typer(
    help="Run the distributed stack on this machine (docs/stack.md)", no_args_is_help=True
)


@stack_app.command("up")
def up(
    detach: Annotated[
        bool, typer.Option(help="Return once ready; stop later with `rampart stack down`")
    ] = False,
) -> None:
    """Start redis, Triton, retrieval, ingest, fact-check workers, the Ray Serve orchestrator and the
    gateway; wait until each is ready. Without --detach, Ctrl-C stops everything."""
    from services.stack.control import start_stack, stop_stack
    from services.stack.plan import Addresses

    settings = load_settings()
    logs = settings.stack_dir().resolve()
    console.print(f"starting the stack (logs: {logs / 'logs'}) …")
    try:
        proc, sup = start_stack(settings, Path.cwd(), log=logs / "supervisord.out" if detach else None)
    except RampartError as exc:
        raise fail(exc) from exc
    except KeyboardInterrupt:
        raise typer.Exit(code=130) from None
    console.print(
        f"[green]stack ready[/green]: gateway {Addresses.of(settings).gateway_url} (OpenAPI: /docs)"
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
