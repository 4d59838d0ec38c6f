"""``RedisFeedbackStore`` (shared by gateway replicas) against a real redis-server under the
``FeedbackStore`` contract, and what only it does: a Redis that does not answer is UNAVAILABLE without
the URL's credentials, and the keys stay under ``rampart:feedback:`` (the gateway's ACL user)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.net import free_port
from services.learning.feedback_redis import RedisFeedbackStore
from services.learning.feedback_store import FeedbackStore
from tests.contracts.feedback_store import MAKE_STORE, FeedbackStoreContract, event, impression
from tests.integration.redis_server import RedisServer

DB = 4


class TestRedisFeedbackStore(FeedbackStoreContract):
    @pytest.fixture()
    def make_store(self, redis_server: RedisServer) -> Iterator[MAKE_STORE]:
        redis_server.client(DB).flushdb()  # one database, emptied per test
        stores: list[FeedbackStore] = []

        def make(retention_s: float = 86400.0) -> FeedbackStore:
            stores.append(RedisFeedbackStore(redis_server.url(DB), retention_s=retention_s))
            return stores[-1]

        yield make
        for store in stores:
            store.close()


def test_every_key_is_under_the_gateway_users_prefix(redis_server: RedisServer) -> None:
    redis_server.client(DB).flushdb()
    store = RedisFeedbackStore(redis_server.url(DB), retention_s=60)
    store.remember(impression("acme", "alice", "req-0001"))
    store.append([event("acme", "alice")])
    keys = sorted(k.decode() for k in redis_server.client(DB).keys("*"))
    assert keys == [
        "rampart:feedback:events:acme", "rampart:feedback:imp:acme:alice:req-0001", "rampart:feedback:tenants",
    ]  # fmt: skip
    store.close()


def test_redis_down_is_unavailable_without_credentials() -> None:
    url = f"redis://gateway:hunter2@127.0.0.1:{free_port()}/3"  # nothing listens there
    store = RedisFeedbackStore(url, retention_s=60)
    for call in (store.check, lambda: store.append([event("acme", "alice")]), lambda: list(store.export())):
        with pytest.raises(RampartError) as exc:
            call()
        assert exc.value.code is ErrorCode.UNAVAILABLE and "hunter2" not in exc.value.message
        assert "gateway:***@127.0.0.1" in exc.value.message
