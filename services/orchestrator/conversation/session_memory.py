"""In-process session store (embedded mode): a bounded dict with per-session expiry."""

from __future__ import annotations

import threading
import time

from services.common.types import Principal
from services.orchestrator.conversation.config import SessionSettings
from services.orchestrator.conversation.sessions import (
    Session,
    check_session_id,
    owner_key,
    owner_key_of,
    session_not_found,
)


class MemorySessionStore:
    def __init__(self, settings: SessionSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._items: dict[tuple[str, str], tuple[float, str]] = {}  # (owner, id) -> (expiry, json)

    def load(self, principal: Principal, session_id: str) -> Session:
        key = (owner_key(principal), check_session_id(session_id))
        with self._lock:
            item = self._items.get(key)
            if item is None or item[0] < time.monotonic():
                self._items.pop(key, None)
                raise session_not_found(session_id, self.settings.ttl_s)
            return Session.model_validate_json(item[1])  # a copy: callers cannot alias stored state

    def save(self, session: Session) -> None:
        key = (owner_key_of(session), session.id)
        now = time.monotonic()
        with self._lock:
            self._items[key] = (now + self.settings.ttl_s, session.model_dump_json())
            if len(self._items) > self.settings.max_sessions:
                self._evict(now)

    def close(self) -> None:
        with self._lock:
            self._items.clear()

    def _evict(self, now: float) -> None:
        """Drop expired sessions, then the ones closest to expiry, down to the limit."""
        for k in [k for k, (exp, _) in self._items.items() if exp < now]:
            del self._items[k]
        excess = len(self._items) - self.settings.max_sessions
        if excess > 0:
            for k in sorted(self._items, key=lambda k: self._items[k][0])[:excess]:
                del self._items[k]
