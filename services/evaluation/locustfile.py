"""Locust users for ``rampart bench stack``: ``/v1/search`` as one API key, back to back.

Run by the bench (``locust -f services/evaluation/locustfile.py --headless …``), or by hand against
any gateway::

    RAMPART_BENCH_API_KEY=rk_… locust -f services/evaluation/locustfile.py --headless \\
        -u 4 -r 4 -t 60s --host http://127.0.0.1:8080

``RAMPART_BENCH_QUERIES`` (a JSON list) and ``RAMPART_BENCH_TOP_K`` set the requests; each user
cycles through the queries from its own offset. No wait between requests: each user is one client
in a closed loop, so ``-u`` is the concurrency.
"""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Iterator

from locust import HttpUser, constant, task

DEFAULT_QUERIES = ["How many weeks of parental leave does a primary caregiver get?"]
_offsets = itertools.count()


def _queries() -> list[str]:
    raw = os.environ.get("RAMPART_BENCH_QUERIES")
    queries = json.loads(raw) if raw else DEFAULT_QUERIES
    if not isinstance(queries, list) or not queries or not all(isinstance(q, str) for q in queries):
        raise ValueError(f"RAMPART_BENCH_QUERIES must be a non-empty JSON list of strings (got {raw!r})")
    return queries


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
        self._top_k = int(os.environ.get("RAMPART_BENCH_TOP_K", "10"))

    @task
    def search(self) -> None:
        self.client.post(
            "/v1/search", json={"query": next(self._queries), "top_k": self._top_k}, name="search"
        )
