"""A reranker that (re)connects on demand, so the gateway starts and serves while Triton is down.

Search degrades to fused order while the backend is unreachable; the next call after
``retry_interval_s`` tries to connect again, so the stack recovers on its own when Triton returns.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence

from services.common.errors import ErrorCode, RampartError
from services.rerank.reranker import Reranker

log = logging.getLogger(__name__)


class ReconnectingReranker:
    def __init__(self, connect: Callable[[], Reranker], *, name: str, retry_interval_s: float = 5.0) -> None:
        self._connect = connect
        self._name = name
        self._interval = retry_interval_s
        self._inner: Reranker | None = None
        self._last_attempt = float("-inf")
        self._last_error = "not connected yet"
        self._lock = threading.Lock()
        with contextlib.suppress(RampartError):  # logged; searches degrade until the backend is reachable
            self._get(force=True)

    def _get(self, *, force: bool = False) -> Reranker:
        with self._lock:
            if self._inner is not None:
                return self._inner
            now = time.monotonic()
            if force or now - self._last_attempt >= self._interval:
                self._last_attempt = now
                try:
                    self._inner = self._connect()
                    log.info("reranker connected: %s", self._inner.model_id)
                    return self._inner
                except RampartError as exc:
                    self._last_error = exc.message
                    log.warning("reranker %s unavailable: %s", self._name, exc.message)
            raise RampartError(
                ErrorCode.UNAVAILABLE, f"reranker {self._name} unavailable: {self._last_error}"
            )

    @property
    def model_id(self) -> str:
        inner = self._inner
        return inner.model_id if inner is not None else f"{self._name}:disconnected"

    @property
    def first_stage_weight(self) -> float | None:
        inner = self._inner
        return inner.first_stage_weight if inner is not None else None

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        return self._get().score(query, passages)

    def check_ready(self) -> None:
        self._get().check_ready()

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
