"""``/metrics`` for a prefork Celery worker: every process's counters, summed.

Tasks run in forked child processes, each with its own copy of the metrics; prometheus_client's
multiprocess mode has each write to files in ``PROMETHEUS_MULTIPROC_DIR`` and the parent serve their
sum. The variable must be set before prometheus_client is first imported (it picks its storage at
import), so it comes from the environment (`rampart stack` sets it), never from code here.
"""

from __future__ import annotations

import os
from pathlib import Path

from prometheus_client import CollectorRegistry, multiprocess

from services.common.errors import ErrorCode, RampartError
from services.common.metrics import start_metrics_server

ENV = "PROMETHEUS_MULTIPROC_DIR"


def serve_worker_metrics(host: str, port: int) -> None:
    """Serve the summed metrics of this worker's processes on ``host:port`` (a daemon thread)."""
    where = os.environ.get(ENV, "")
    if not where or not Path(where).is_dir():
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"factcheck.celery.metrics_port={port} needs {ENV} set to an existing directory (empty: "
            "old files would add up) "
            f"before the worker starts (got {where!r}); or set the port to 0",
        )
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=where)  # type: ignore[no-untyped-call]
    start_metrics_server(host, port, registry)
