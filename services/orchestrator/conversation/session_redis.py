"""Redis session store (distributed mode): one JSON value per session, expiring after the TTL.

Keys are ``rampart:session:<hash(tenant, user)>:<id>``: a lookup with another principal's id misses.
Redis being down is an error for conversational requests (the history is gone), reported as
UNAVAILABLE with the URL's host, never its credentials.
"""

from __future__ import annotations

from urllib.parse import urlsplit

import redis

from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal
from services.orchestrator.conversation.config import SessionSettings
from services.orchestrator.conversation.sessions import (
    Session,
    check_session_id,
    owner_key,
    owner_key_of,
    session_not_found,
)

PREFIX = "rampart:session:"


class RedisSessionStore:
    def __init__(self, settings: SessionSettings) -> None:
        self.settings = settings
        self._redis = redis.Redis.from_url(settings.redis_url, socket_timeout=2.0, socket_connect_timeout=2.0)
        self._where = urlsplit(settings.redis_url).hostname or "?"

    def load(self, principal: Principal, session_id: str) -> Session:
        key = f"{PREFIX}{owner_key(principal)}:{check_session_id(session_id)}"
        try:
            raw = self._redis.get(key)
        except redis.RedisError as exc:
            raise self._down(exc) from None
        if raw is None:
            raise session_not_found(session_id, self.settings.ttl_s)
        return Session.model_validate_json(raw)

    def save(self, session: Session) -> None:
        key = f"{PREFIX}{owner_key_of(session)}:{session.id}"
        try:
            self._redis.set(key, session.model_dump_json(), ex=self.settings.ttl_s)
        except redis.RedisError as exc:
            raise self._down(exc) from None

    def close(self) -> None:
        self._redis.close()

    def _down(self, exc: Exception) -> RampartError:
        return RampartError(
            ErrorCode.UNAVAILABLE,
            f"session store at {self._where} is unreachable ({type(exc).__name__}); retry, or send the "
            "history in the request instead of a session_id",
        )
