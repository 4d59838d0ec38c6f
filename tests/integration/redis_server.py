"""Real processes for the Celery fact-check tests: Debian's ``redis-server`` and ``rampart worker``.

The launchers are the product's (:mod:`services.common.redis_server`,
:mod:`services.factcheck.worker_process`, also used by ``rampart bench factcheck``); here they only
get the tests' defaults (hermetic worker env, one embedding thread) and turn a failed start into a
test failure that shows the process's log.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from services.common import redis_server as _redis
from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.factcheck.config import CelerySettings, FactCheckSettings
from services.factcheck.worker_process import WorkerProcess


class RedisServer(_redis.RedisServer):
    """``redis-server`` on 127.0.0.1 with persistence off; restartable on the same port."""

    def start(self, timeout_s: float = 10.0) -> RedisServer:
        if _redis.redis_server_binary() is None:
            pytest.fail(
                "redis-server is not installed; run `make system-deps` (apt-get install redis-server)"
            )
        try:
            super().start(timeout_s)
        except RampartError as exc:
            pytest.fail(exc.message)
        return self


def celery_settings(server: RedisServer, models_dir: Path, **celery: object) -> RampartSettings:
    """Settings pointing the fact-checker (and workers given the same env) at ``server``."""
    return RampartSettings(
        models_dir=models_dir,
        log_level="WARNING",
        factcheck=FactCheckSettings(
            backend="celery",
            # the orchestrator's Redis user when the server has users (the caller's side of Celery)
            celery=CelerySettings(
                broker_url=server.url(0, "orchestrator"),
                result_backend=server.url(1, "orchestrator"),
                **celery,
            ),
        ),
    )


class CeleryWorker(WorkerProcess):
    """``rampart worker`` (prefork) against ``server``, with the session's models."""

    def __init__(
        self,
        server: RedisServer,
        models_dir: Path,
        work: Path,
        concurrency: int = 1,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            broker_url=server.url(0, "worker"),  # the workers' Redis user when the server has users
            result_backend=server.url(1, "worker"),
            models_dir=models_dir,
            work=work,
            concurrency=concurrency,
            hostname=f"fc-test-{uuid.uuid4().hex[:8]}@localhost",
            env={"RAMPART_EMBEDDING__THREADS": "1", **(extra_env or {})},
        )
        self.server = server

    def start(self, timeout_s: float = 60.0) -> CeleryWorker:
        try:
            super().start(timeout_s)
        except RampartError as exc:
            pytest.fail(exc.message)
        return self
