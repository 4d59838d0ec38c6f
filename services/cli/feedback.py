"""``rampart feedback export``: the stored feedback as JSON lines (docs/learning.md, "Feedback").

Reads the store the gateway writes, chosen by the same factory and settings (``feedback.backend``:
``<data_dir>/feedback.sqlite3``, or the Redis streams at ``feedback.redis_url``), so it works while the
server runs (SQLite in WAL mode lets a reader beside the writer). One event per line: tenant, user,
credential, the search's request id and query, chunk and document ids, rank, label, comment, time and
the store's id, oldest first per tenant.

    rampart feedback export --tenant acme --since 2026-11-01 --out acme-feedback.jsonl
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, TextIO

import typer

from services.cli.ui import console, fail, load_settings
from services.common.errors import RampartError
from services.learning.feedback_store import FeedbackEvent, build_feedback_store

feedback_app = typer.Typer(help="User feedback on results (POST /v1/feedback).", no_args_is_help=True)


def parse_time(value: str | None, option: str) -> float | None:
    """Seconds since the epoch from ``value``: an ISO 8601 date or time (UTC unless it names a zone),
    or a number of seconds since the epoch."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise typer.BadParameter(
            f"{value!r} is not a time; give an ISO 8601 date or time (2026-11-01, 2026-11-01T09:30:00Z) "
            "or seconds since the epoch",
            param_hint=option,
        ) from exc
    return (parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)).timestamp()


@feedback_app.command("export")
def feedback_export(
    tenant: Annotated[
        str | None, typer.Option(help="Only this tenant's feedback (default: every tenant)")
    ] = None,
    since: Annotated[
        str | None, typer.Option(help="From this time on (ISO 8601 or epoch seconds; UTC)")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Before this time (ISO 8601 or epoch seconds; UTC)")
    ] = None,
    out_path: Annotated[
        Path | None, typer.Option("--out", help="Write to this file (mode 600) instead of stdout")
    ] = None,
) -> None:
    """Write the stored feedback as JSON lines, one event per line."""
    start, end = parse_time(since, "--since"), parse_time(until, "--until")
    settings = load_settings()
    store = build_feedback_store(settings)
    try:
        if out_path is None:
            n = write_events(store.export(tenant, start, end), sys.stdout)
        else:
            out_path.parent.mkdir(parents=True, exist_ok=True)
            out_path.touch(mode=0o600)  # who labelled what, and their comments: not for every reader
            with out_path.open("w", encoding="utf-8") as f:
                n = write_events(store.export(tenant, start, end), f)
    except RampartError as exc:
        raise fail(exc) from exc
    finally:
        store.close()
    where = f" to {out_path}" if out_path is not None else ""
    console.print(f"exported {n} feedback events{where}" + (f" of tenant {tenant}" if tenant else ""))


def write_events(events: Iterable[FeedbackEvent], stream: TextIO) -> int:
    n = 0
    for event in events:
        stream.write(event.to_json() + "\n")
        n += 1
    return n
