"""Shared pieces of the CLI: consoles, settings, error exit, progress bars."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from services.common.errors import ErrorCode, RampartError
from services.common.settings import RampartSettings
from services.common.telemetry import configure_logging

console = Console(stderr=True)
out = Console()


def load_settings() -> RampartSettings:
    settings = RampartSettings()
    configure_logging(settings.log_level, settings.log_format)
    return settings


def fail(exc: RampartError) -> typer.Exit:
    console.print(f"[red]error[/red] ({exc.code.value}): {escape(exc.message)}")
    return typer.Exit(code=2)


def server_hint(exc: RampartError, settings: RampartSettings) -> RampartError:
    """``exc`` with a pointer to ``--url`` when the local index is locked: that is almost always
    ``rampart serve`` holding it, and the command works through the server instead."""
    if (
        exc.code is not ErrorCode.FAILED_PRECONDITION
        or "in use by another rampart process" not in exc.message
    ):
        return exc
    url = f"http://{settings.gateway.host}:{settings.gateway.port}"
    return RampartError(
        exc.code,
        f"{exc.message}; if `rampart serve` holds it, go through the server instead: "
        f"--url {url} (or export RAMPART_URL={url}) with --api-key (or RAMPART_API_KEY)",
        **exc.details,
    )


def print_error(message: str) -> None:
    """An error line on stderr. The message is escaped: it may quote user input or log lines, and
    rich would read their brackets as markup (and fail on a stray closing tag)."""
    console.print(f"[red]error[/red]: {escape(message)}")


def split_csv(values: str) -> list[str]:
    return [v.strip() for v in values.split(",") if v.strip()]


def progress_bar() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def task_updater(bar: Progress) -> Callable[[str, int, int], None]:
    """A ``(name, done, total)`` callback that keeps one progress bar per name."""
    tasks: dict[str, TaskID] = {}

    def update(name: str, done: int, total: int) -> None:
        if name not in tasks:
            tasks[name] = bar.add_task(name, total=total)
        bar.update(tasks[name], completed=done, total=total)  # a name reused for another set: its total

    return update


def invocation(ctx: typer.Context) -> str:
    """The full command line of this invocation with every option spelled out (for model cards): it
    reproduces the run even when defaults change later."""
    parts = ["rampart", *ctx.command_path.split()[1:]]
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if value is None or not param.opts:
            continue
        if isinstance(value, bool):
            flags = param.opts if value else param.secondary_opts
            if flags:
                parts.append(flags[0])
        elif param.param_type_name == "argument":
            parts.append(str(value))
        else:
            parts += [param.opts[0], str(value)]
    return " ".join(parts)


def write_json_report(path: Path, record: dict[str, Any]) -> None:
    """Write a command's figures as indented JSON (parents created) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    console.print(f"wrote {path}")
