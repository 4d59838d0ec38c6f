"""Rate limits: token buckets per API key, per tenant and per client IP, weighted by request cost.

A bucket holds up to one minute's worth of units and refills at ``rate_per_minute / 60`` per second;
a request takes its cost (``gateway.costs``: an answer costs more than a search) or is refused with
the seconds until enough has refilled. Two backends behind one Protocol, chosen by
:func:`build_limiter`:

- :class:`InMemoryLimiter` (the embedded default): the buckets of this process.
- :class:`RedisLimiter` (``gateway.rate_limit_redis_url``): the buckets in Redis, updated by one Lua
  script per request (read, refill, take: atomic on the server, on the server's clock), so every
  gateway replica draws from the same budget. Three replicas with per-process buckets would each
  allow the full rate: three times the limit a tenant was sold.

A Redis that stops answering fails the request (503, naming the URL), not open: a limiter that lets
everything through while Redis is down is a limiter an attacker can switch off by loading Redis.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Protocol

from services.common.errors import ErrorCode, RampartError

if TYPE_CHECKING:
    import redis

    from services.gateway.config import GatewaySettings


class Limiter(Protocol):
    def take(self, bucket: str, cost: int, rate_per_minute: int) -> tuple[bool, float]:
        """``(allowed, seconds until the cost is available)``; always allowed when the rate is 0.
        A ``cost`` of 0 asks whether a unit is left without taking it."""
        ...

    def check(self) -> None:
        """Raise ``RampartError(UNAVAILABLE)`` if the limiter cannot serve (start-up check)."""
        ...


class InMemoryLimiter:
    """Token buckets in this process (one gateway process: the embedded mode).

    Bounded: past ``max_buckets`` (addresses are the attacker's to choose: an IPv6 /64 is 2^64 of
    them), buckets untouched for a minute are dropped. Such a bucket has refilled completely, so
    dropping it changes no answer."""

    def __init__(self, max_buckets: int = 100_000) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()
        self.max_buckets = max_buckets

    def take(self, bucket: str, cost: int, rate_per_minute: int) -> tuple[bool, float]:
        if rate_per_minute <= 0:
            return True, 0.0
        capacity = float(rate_per_minute)
        rate = rate_per_minute / 60.0
        need = min(float(max(cost, 1)), capacity)  # a cost above a minute's worth could never be paid
        now = time.monotonic()
        with self._lock:
            if len(self._buckets) >= self.max_buckets and bucket not in self._buckets:
                self._prune(now)
            tokens, last = self._buckets.get(bucket, (capacity, now))
            tokens = min(capacity, tokens + (now - last) * rate)
            if tokens >= need:
                self._buckets[bucket] = (tokens - min(float(cost), need), now)
                return True, 0.0
            self._buckets[bucket] = (tokens, now)
            return False, (need - tokens) / rate

    def check(self) -> None:
        return None

    def _prune(self, now: float) -> None:
        """Drop the buckets idle for a minute or more (full again: the same as absent)."""
        self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < 60.0}

    def __len__(self) -> int:
        return len(self._buckets)


# KEYS[1] bucket; ARGV: capacity, refill per second, cost. The server's clock (TIME), so replicas
# with skewed clocks share one notion of "now". Returns {allowed, wait in milliseconds}.
TAKE_SCRIPT = """
local capacity = tonumber(ARGV[1])
local rate = tonumber(ARGV[2])
local cost = tonumber(ARGV[3])
local need = math.min(math.max(cost, 1), capacity)
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1]) or capacity
local ts = tonumber(state[2]) or now
tokens = math.min(capacity, tokens + math.max(0, now - ts) * rate)
local allowed = 0
local wait_ms = 0
if tokens >= need then
  tokens = tokens - math.min(cost, need)
  allowed = 1
else
  wait_ms = math.ceil((need - tokens) / rate * 1000)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(capacity / rate) + 1)
return {allowed, wait_ms}
"""


class RedisLimiter:
    """Token buckets in Redis, shared by every replica (``gateway.rate_limit_redis_url``)."""

    PREFIX = "rampart:ratelimit:"

    def __init__(self, url: str, *, timeout_s: float = 1.0) -> None:
        import redis as redis_lib

        self._shown = _without_password(url)
        # from_url does not connect: the first command does (no network in constructors)
        self._client: redis.Redis = redis_lib.Redis.from_url(
            url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s
        )
        self._script = self._client.register_script(TAKE_SCRIPT)

    def take(self, bucket: str, cost: int, rate_per_minute: int) -> tuple[bool, float]:
        if rate_per_minute <= 0:
            return True, 0.0
        import redis as redis_lib

        try:
            allowed, wait_ms = self._script(
                keys=[self.PREFIX + bucket], args=[rate_per_minute, rate_per_minute / 60.0, cost]
            )
        except redis_lib.RedisError as exc:
            raise self._unavailable(exc) from exc
        return bool(allowed), int(wait_ms) / 1000.0

    def check(self) -> None:
        import redis as redis_lib

        try:
            self._client.ping()
        except redis_lib.RedisError as exc:
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: Exception) -> RampartError:
        return RampartError(
            ErrorCode.UNAVAILABLE,
            f"the rate-limit Redis at {self._shown} is not answering ({type(exc).__name__}); start it or "
            "unset gateway.rate_limit_redis_url for in-process limits",
            stage="rate_limit",
        )


def _without_password(url: str) -> str:
    """The URL as logs and errors may show it: a password in it becomes ``***``."""
    scheme, sep, rest = url.partition("://")
    if sep and "@" in rest:
        creds, _, host = rest.rpartition("@")
        user = creds.split(":", 1)[0]
        return f"{scheme}://{user}:***@{host}"
    return url


def build_limiter(settings: GatewaySettings) -> Limiter:
    """The one factory: Redis when ``rate_limit_redis_url`` is set (replicas share limits), else
    in-process buckets."""
    if settings.rate_limit_redis_url is not None:
        return RedisLimiter(settings.rate_limit_redis_url.get_secret_value())
    return InMemoryLimiter()
