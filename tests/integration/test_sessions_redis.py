"""The Redis session store against a real redis-server: round trip, principal scoping, TTL, outage."""

from __future__ import annotations

import time

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.net import free_port
from services.common.types import Principal
from services.orchestrator.conversation.config import SessionSettings
from services.orchestrator.conversation.session_redis import RedisSessionStore
from services.orchestrator.conversation.sessions import Turn, build_session_store, new_session
from tests.integration.redis_server import RedisServer

pytestmark = pytest.mark.integration

ALICE = Principal(tenant="acme", user="alice")


def test_round_trip_scoping_and_ttl(redis_server: RedisServer) -> None:
    store = build_session_store(SessionSettings(backend="redis", redis_url=redis_server.url(3), ttl_s=1))
    assert isinstance(store, RedisSessionStore)
    s = new_session(ALICE)
    s.graph.update(["Dune"], ["Frank Herbert"])
    s.add_turn(Turn(query="Who wrote Dune?", rewritten="Who wrote Dune?", route="simple"), max_turns=5)
    store.save(s)
    got = store.load(ALICE, s.id)
    assert got.history() == ["Who wrote Dune?"] and "frank herbert" in got.graph.facts
    with pytest.raises(RampartError) as exc:
        store.load(Principal(tenant="acme", user="mallory"), s.id)
    assert exc.value.code is ErrorCode.NOT_FOUND
    time.sleep(1.3)
    with pytest.raises(RampartError) as gone:
        store.load(ALICE, s.id)
    assert gone.value.code is ErrorCode.NOT_FOUND
    store.close()


def test_redis_down_is_unavailable_without_credentials() -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"  # nothing listens there
    store = RedisSessionStore(SessionSettings(backend="redis", redis_url=url))
    with pytest.raises(RampartError) as exc:
        store.save(new_session(ALICE))
    assert exc.value.code is ErrorCode.UNAVAILABLE
    assert "hunter2" not in exc.value.message
