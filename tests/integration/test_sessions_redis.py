"""``RedisSessionStore`` (distributed mode: shared by every replica) against a real redis-server under
the ``SessionStore`` contract, and its outage: UNAVAILABLE, never showing the URL's credentials."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.net import free_port
from services.orchestrator.conversation.config import SessionSettings
from services.orchestrator.conversation.session_redis import RedisSessionStore
from services.orchestrator.conversation.sessions import SessionStore, build_session_store, new_session
from tests.contracts.session_store import ALICE, MAKE_STORE, SessionStoreContract
from tests.integration.redis_server import RedisServer


class TestRedisSessionStore(SessionStoreContract):
    @pytest.fixture()
    def make_store(self, redis_server: RedisServer) -> Iterator[MAKE_STORE]:
        stores: list[SessionStore] = []

        def make(**settings: object) -> SessionStore:
            store = build_session_store(
                SessionSettings(backend="redis", redis_url=redis_server.url(3), **settings)
            )
            assert isinstance(store, RedisSessionStore)
            stores.append(store)
            return store

        yield make
        for store in stores:
            store.close()


def test_redis_down_is_unavailable_without_credentials() -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"  # nothing listens there
    store = RedisSessionStore(SessionSettings(backend="redis", redis_url=url))
    with pytest.raises(RampartError) as exc:
        store.save(new_session(ALICE))
    assert exc.value.code is ErrorCode.UNAVAILABLE
    assert "hunter2" not in exc.value.message
