"""Fixtures for integration tests that need a real Redis and real Celery workers (fact-check), and
the session's OpenSearch node (tests/integration/opensearch_server.py).

The module-scoped pair serves the contract suite; tests that break things (stop Redis, kill a worker)
start their own with the factories, so they never disturb each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.integration.cli_server import cli_env
from tests.integration.opensearch_server import opensearch, summary
from tests.integration.redis_server import CeleryWorker, RedisServer


@pytest.fixture()
def env(tmp_path: Path, models_dir: Path) -> dict[str, str]:
    """The CLI's settings for one test: its own data folder (tests/integration/cli_server.py)."""
    return cli_env(tmp_path / "data", models_dir)


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def celery_worker(
    redis_server: RedisServer, models_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CeleryWorker]:
    worker = CeleryWorker(redis_server, models_dir, tmp_path_factory.mktemp("worker")).start()
    yield worker
    worker.stop()


@pytest.fixture()
def start_redis(tmp_path: Path) -> Iterator[Callable[[], RedisServer]]:
    """Start a private redis-server (stopped at the end of the test)."""
    servers: list[RedisServer] = []

    def start() -> RedisServer:
        servers.append(RedisServer(tmp_path / f"redis-{len(servers)}").start())
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


@pytest.fixture()
def start_worker(tmp_path: Path, models_dir: Path) -> Iterator[Callable[..., CeleryWorker]]:
    """Start a private ``rampart worker`` against a given server (stopped at the end of the test)."""
    workers: list[CeleryWorker] = []

    def start(server: RedisServer, concurrency: int = 1, **env: str) -> CeleryWorker:
        workers.append(CeleryWorker(server, models_dir, tmp_path / "workers", concurrency, env).start())
        return workers[-1]

    yield start
    for w in workers:
        w.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The OpenSearch node's start-up cost, so that a slow CI run shows where its time went."""
    line = summary(config)
    if line is not None:
        terminalreporter.write_line(line)


__all__ = ["opensearch"]
