"""The ``Limiter`` contract (services/gateway/rate_limit.py): what the gateway's access checks rely on
from any rate limiter. Subclass :class:`LimiterContract` and provide ``limiter`` (tests/README.md).

Every test uses bucket names of its own, so a limiter shared across tests (one Redis) is fine.
"""

from __future__ import annotations

import time
import uuid

import pytest

from services.gateway.rate_limit import Limiter


def fresh() -> str:
    return f"test:{uuid.uuid4().hex}"


class LimiterContract:
    """Token buckets of ``rate_per_minute`` units, at most a minute's worth at once, refilling at
    ``rate/60`` per second; a request takes its cost or is refused with the wait; cost 0 peeks; rate 0
    never refuses; buckets are independent."""

    @pytest.fixture()
    def limiter(self) -> Limiter:
        raise NotImplementedError(
            f"{type(self).__name__} must provide the limiter fixture: the implementation under test "
            "(tests/README.md)"
        )

    def test_a_minutes_worth_then_refused_with_the_wait(self, limiter: Limiter) -> None:
        b = fresh()
        assert [limiter.take(b, 1, 3)[0] for _ in range(3)] == [True, True, True]
        allowed, wait = limiter.take(b, 1, 3)
        assert not allowed and 15.0 < wait <= 20.0  # one unit at 3/min: up to 20 s
        assert limiter.take(fresh(), 1, 3)[0]  # another bucket is untouched

    def test_cost_weighs_and_zero_peeks(self, limiter: Limiter) -> None:
        b = fresh()
        assert limiter.take(b, 4, 6)[0]  # an answer: 4 of 6
        assert limiter.take(b, 0, 6)[0] and limiter.take(b, 0, 6)[0]  # peeks take nothing
        allowed, wait = limiter.take(b, 4, 6)
        assert not allowed and 15.0 < wait <= 20.5  # 2 units short at 0.1/s
        assert limiter.take(b, 2, 6)[0]
        assert not limiter.take(b, 0, 6)[0]  # empty: a peek says so

    def test_a_cost_above_a_minutes_worth_waits_for_a_full_bucket(self, limiter: Limiter) -> None:
        b = fresh()
        assert limiter.take(b, 100, 5)[0]  # capped at the capacity, not refused forever
        assert not limiter.take(b, 1, 5)[0]

    def test_refills_over_time(self, limiter: Limiter) -> None:
        b = fresh()
        assert limiter.take(b, 60, 60)[0]
        assert not limiter.take(b, 1, 60)[0]
        time.sleep(1.2)  # 60/min = one unit per second
        assert limiter.take(b, 1, 60)[0]

    def test_rate_zero_disables(self, limiter: Limiter) -> None:
        b = fresh()
        assert all(limiter.take(b, 1000, 0) == (True, 0.0) for _ in range(5))

    def test_check_passes_when_serving(self, limiter: Limiter) -> None:
        limiter.check()
