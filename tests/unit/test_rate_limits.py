"""The in-process limiter against the ``Limiter`` contract, and its bound on memory."""

from __future__ import annotations

import time

import pytest

from services.common.errors import ErrorCode, RampartError
from services.gateway.rate_limit import InMemoryLimiter, Limiter, RedisLimiter
from tests.contracts.limiter import LimiterContract


class TestInMemoryLimiter(LimiterContract):
    @pytest.fixture()
    def limiter(self) -> Limiter:
        return InMemoryLimiter()


def test_buckets_are_bounded_by_dropping_idle_ones() -> None:
    """Addresses are the attacker's to choose: past max_buckets, idle (full) buckets are dropped."""
    rl = InMemoryLimiter(max_buckets=3)
    for ip in ("a", "b", "c"):
        assert rl.take(f"ip:{ip}", 1, 60)[0]
    rl._buckets = {k: (tokens, last - 61.0) for k, (tokens, last) in rl._buckets.items()}  # a minute ago
    assert rl.take("ip:busy", 1, 60)[0]  # a fourth address prunes the idle three
    assert len(rl) == 1
    assert rl.take("ip:a", 60, 60)[0]  # a dropped bucket is a full one again
    started = time.monotonic()
    for i in range(1000):
        rl.take(f"ip:x{i}", 1, 60)
    assert time.monotonic() - started < 5.0


def test_redis_password_never_reaches_a_message() -> None:
    """The limiter's errors name the Redis they could not reach, without its password (errors end up
    in logs and in 503 bodies)."""
    limiter = RedisLimiter("redis://gateway:hunter2@127.0.0.1:1/0", timeout_s=0.2)  # nothing listens on 1
    with pytest.raises(RampartError) as err:
        limiter.check()
    assert err.value.code is ErrorCode.UNAVAILABLE
    assert "redis://gateway:***@127.0.0.1:1/0" in err.value.message and "hunter2" not in err.value.message
