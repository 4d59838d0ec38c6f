"""Per-key token bucket: ``rate_per_minute`` sustained, bursts up to one minute's worth."""

from __future__ import annotations

import threading
import time


class RateLimiter:
    def __init__(self, rate_per_minute: int) -> None:
        self.rate = rate_per_minute / 60.0
        self.capacity = float(rate_per_minute)
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> tuple[bool, float]:
        """``(allowed, seconds until a token is available)``; always allowed when disabled (rate 0)."""
        if self.capacity <= 0:
            return True, 0.0
        now = time.monotonic()
        with self._lock:
            tokens, last = self._buckets.get(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                return True, 0.0
            self._buckets[key] = (tokens, now)
            return False, (1.0 - tokens) / self.rate
