"""The Redis limiter against the ``Limiter`` contract on a real redis-server, and its failure: a Redis
that stops answering is an error naming it (the gateway answers 503), never an open gate."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.errors import ErrorCode, RampartError
from services.gateway.rate_limit import Limiter, RedisLimiter
from tests.contracts.limiter import LimiterContract
from tests.integration.redis_server import RedisServer


class TestRedisLimiter(LimiterContract):
    @pytest.fixture()
    def limiter(self, redis_server: RedisServer) -> Limiter:
        return RedisLimiter(redis_server.url(2))


def test_replicas_share_buckets_and_a_restart_reloads_the_script(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()
    try:
        one, two = RedisLimiter(server.url(0)), RedisLimiter(server.url(0))
        assert one.take("k", 2, 3)[0] and not two.take("k", 2, 3)[0]
        server.stop()
        with pytest.raises(RampartError) as err:
            one.take("k", 1, 3)
        assert err.value.code is ErrorCode.UNAVAILABLE and f"127.0.0.1:{server.port}" in err.value.message
        server.start()  # same port, empty: the script cache is gone too
        assert one.take("k", 1, 3)[0]
    finally:
        server.stop()
