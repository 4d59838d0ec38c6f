"""``MemorySessionStore`` (embedded mode: a bounded dict in this process) under the ``SessionStore``
contract, and its own bound (``sessions.max_sessions``)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from services.common.errors import RampartError
from services.orchestrator.conversation.config import SessionSettings
from services.orchestrator.conversation.session_memory import MemorySessionStore
from services.orchestrator.conversation.sessions import SessionStore, build_session_store, new_session
from tests.contracts.session_store import ALICE, MAKE_STORE, SessionStoreContract


class TestMemorySessionStore(SessionStoreContract):
    @pytest.fixture()
    def make_store(self) -> Iterator[MAKE_STORE]:
        stores: list[SessionStore] = []

        def make(**settings: object) -> SessionStore:
            store = build_session_store(SessionSettings(backend="memory", **settings))
            assert isinstance(store, MemorySessionStore)
            stores.append(store)
            return store

        yield make
        for store in stores:
            store.close()


def test_memory_store_expires_and_bounds_sessions() -> None:
    store = MemorySessionStore(SessionSettings(ttl_s=1, max_sessions=3))
    sessions = [new_session(ALICE) for _ in range(5)]
    for s in sessions:
        store.save(s)
    kept = 0
    for s in sessions:
        try:
            store.load(ALICE, s.id)
            kept += 1
        except RampartError:
            pass
    assert kept == 3
    time.sleep(1.1)
    with pytest.raises(RampartError):
        store.load(ALICE, sessions[-1].id)
