"""Locust users for ``rampart bench stack`` and ``rampart bench faults``: one API key, back to back.

Run by the benches (``locust -f services/evaluation/locustfile.py --headless …``), or by hand against
any gateway::

    RAMPART_BENCH_API_KEY=rk_… locust -f services/evaluation/locustfile.py --headless \\
        -u 4 -r 4 -t 60s --host http://127.0.0.1:8080

``RAMPART_BENCH_QUERIES`` (a JSON list) and ``RAMPART_BENCH_TOP_K`` set the requests; each user
cycles through the queries from its own offset. ``RAMPART_BENCH_ENDPOINTS`` (comma-separated,
default ``search``) names the endpoints a user alternates between (``search,answer``).
``RAMPART_BENCH_RECORD`` names a file that gets one JSON line per request (start time, endpoint,
status, ms, the response's ``degraded`` stages): the fault bench cuts it into the windows around each
kill, which locust's own totals cannot do. No wait between requests: each user is one client in a
closed loop, so ``-u`` is the concurrency.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator
from typing import IO, Any

from locust import HttpUser, constant, task

DEFAULT_QUERIES = ["How many weeks of parental leave does a primary caregiver get?"]
ENDPOINTS = ("search", "answer")
_offsets = itertools.count()
_record: IO[str] | None = None


def _queries() -> list[str]:
    raw = os.environ.get("RAMPART_BENCH_QUERIES")
    queries = json.loads(raw) if raw else DEFAULT_QUERIES
    if not isinstance(queries, list) or not queries or not all(isinstance(q, str) for q in queries):
        raise ValueError(f"RAMPART_BENCH_QUERIES must be a non-empty JSON list of strings (got {raw!r})")
    return queries


def _endpoints() -> list[str]:
    names = [e.strip() for e in os.environ.get("RAMPART_BENCH_ENDPOINTS", "search").split(",") if e.strip()]
    if not names or any(e not in ENDPOINTS for e in names):
        raise ValueError(f"RAMPART_BENCH_ENDPOINTS must name some of {ENDPOINTS} (got {names!r})")
    return names


def _record_file() -> IO[str] | None:
    """The per-request record, opened once per locust process and line-buffered (a killed run keeps
    every finished line)."""
    global _record
    path = os.environ.get("RAMPART_BENCH_RECORD")
    if path and _record is None:
        _record = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives with the process
    return _record


def _error(response: Any) -> str | None:
    """``code: message`` of an error body (cut to 160 characters): what a window's failures were."""
    if response.status_code in (0, 200):
        return None
    try:
        body = response.json()
        return f"{body.get('code')}: {str(body.get('message'))[:140]}"
    except (ValueError, AttributeError):
        return f"HTTP {response.status_code} without a JSON error body"


def _degraded(response: Any) -> list[str] | None:
    """The stages a 200 response names as skipped; None for another status or a body without JSON."""
    if response.status_code != 200:
        return None
    try:
        return [str(s) for s in response.json().get("degraded") or []]
    except ValueError:
        return None


class SearchUser(HttpUser):
    wait_time = constant(0)

    def on_start(self) -> None:
        key = os.environ.get("RAMPART_BENCH_API_KEY")
        if not key:
            raise ValueError("set RAMPART_BENCH_API_KEY to an API key with the search scope")
        self.client.headers["Authorization"] = f"Bearer {key}"
        queries = _queries()
        start = next(_offsets) % len(queries)
        self._queries: Iterator[str] = itertools.cycle(queries[start:] + queries[:start])
        self._endpoints: Iterator[str] = itertools.cycle(_endpoints())
        self._top_k = int(os.environ.get("RAMPART_BENCH_TOP_K", "10"))
        self._record = _record_file()

    @task
    def search(self) -> None:
        endpoint = next(self._endpoints)
        started = time.time()
        response = self.client.post(
            f"/v1/{endpoint}", json={"query": next(self._queries), "top_k": self._top_k}, name=endpoint
        )
        if self._record is not None:
            line = {
                "t": round(started, 3),
                "endpoint": endpoint,
                "status": int(response.status_code or 0),
                "ms": round((time.time() - started) * 1000, 1),
                "degraded": _degraded(response),
                "error": _error(response),
            }
            self._record.write(json.dumps(line) + "\n")
