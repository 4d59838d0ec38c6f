"""``rampart worker``: a Celery worker node computing fact-check evidence (``factcheck.backend=celery``)."""

from __future__ import annotations

import logging
import os
from typing import Annotated

import typer

from services.cli.ui import console, fail, load_settings
from services.common.errors import RampartError


class _NoTaskData(logging.Filter):
    """Celery attaches task arguments and results (query and passage text) to its log records as
    ``data``, and our formatters print extras: logs must carry ids and counts, never document text."""

    def filter(self, record: logging.LogRecord) -> bool:
        if hasattr(record, "data"):
            record.data = None
        return True


class _NoSuccessLines(logging.Filter):
    """Drops Celery's per-task success line: its message embeds the returned evidence (passage
    snippets). Received, retry and failure lines stay; they name the task id and the error only."""

    def __init__(self) -> None:
        super().__init__()
        from celery.app.trace import LOG_SUCCESS

        self._success: object = LOG_SUCCESS

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg is not self._success


def quiet_task_logs() -> None:
    """Keep task payloads (query and passage text) out of the logs."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(_NoTaskData())
    logging.getLogger("celery.app.trace").addFilter(_NoSuccessLines())


def worker(
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, max=256, help="Worker processes (default: factcheck.celery.concurrency)"),
    ] = None,
    hostname: Annotated[
        str | None,
        typer.Option(help="Node name, unique per broker (default: rampart-factcheck-<pid>@<host>)"),
    ] = None,
) -> None:
    """Run a fact-check worker until interrupted: prefork processes consuming the fact-check queue.

    Point it at the gateway's Redis and models with the same RAMPART_* settings (broker, result
    backend, RAMPART_MODELS_DIR); start as many as you need, on as many machines.
    """
    from services.common.redis_server import redact_url
    from services.factcheck.celery_app import make_app
    from services.factcheck.worker_metrics import serve_worker_metrics

    settings = load_settings()
    c = settings.factcheck.celery
    try:
        app = make_app(settings)
    except RampartError as exc:
        raise fail(exc) from exc
    # Logging is already configured (load_settings): Celery must not replace the root handlers.
    app.conf.worker_hijack_root_logger = False
    quiet_task_logs()
    if c.metrics_port:
        try:
            serve_worker_metrics(c.metrics_host, c.metrics_port)
        except RampartError as exc:
            raise fail(exc) from exc
    n = concurrency or c.concurrency
    console.print(
        f"[green]fact-check worker[/green] queue {c.queue!r}, {n} process(es), broker {redact_url(c.broker_url)}"
    )
    app.worker_main(
        [
            "worker",
            "--pool=prefork",
            f"--concurrency={n}",
            f"--queues={c.queue}",
            f"--hostname={hostname or f'rampart-factcheck-{os.getpid()}@%h'}",
            f"--loglevel={settings.log_level}",
            # Workers share nothing but the queue: skipping the start-up sync (mingle, ~1 s) and the
            # event chatter (gossip) keeps start-up fast and Redis quiet.
            "--without-mingle",
            "--without-gossip",
        ]
    )
