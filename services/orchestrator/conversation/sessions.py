"""Conversation sessions: the turns so far and their fact graph, scoped to one principal, with a TTL.

A session id is minted by the server (unguessable) and handed back to the client, which sends it with
its next turn. Stores look sessions up by (tenant, user, id): another principal's id is simply not
found, so the error says nothing about whether it exists. ``memory`` serves the embedded mode (one
process); ``redis`` is shared by every replica of the distributed mode.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from typing import Protocol

from pydantic import BaseModel, Field

from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal, session_id_problem
from services.orchestrator.conversation.config import SessionSettings
from services.orchestrator.conversation.fact_graph import FactGraph


class Turn(BaseModel):
    query: str
    rewritten: str  # what was searched (= query unless the turn was rewritten)
    route: str = ""
    at: float = Field(default_factory=time.time)


class Session(BaseModel):
    id: str
    tenant: str
    user: str
    turns: list[Turn] = Field(default_factory=list)
    graph: FactGraph = Field(default_factory=FactGraph)
    updated: float = Field(default_factory=time.time)

    def history(self) -> list[str]:
        """Earlier queries as searched (rewritten), oldest first: the router's and rewriter's input."""
        return [t.rewritten for t in self.turns]

    def add_turn(self, turn: Turn, max_turns: int) -> None:
        self.turns = [*self.turns, turn][-max_turns:]
        self.updated = time.time()


def new_session(principal: Principal) -> Session:
    return Session(id="s_" + secrets.token_urlsafe(18), tenant=principal.tenant, user=principal.user)


def owner_key(principal: Principal) -> str:
    """Store key prefix of a principal's sessions (hashed: user names stay out of Redis key space)."""
    return hashlib.sha256(f"{principal.tenant}\0{principal.user}".encode()).hexdigest()[:32]


def owner_key_of(session: Session) -> str:
    return owner_key(Principal(tenant=session.tenant, user=session.user))


def check_session_id(session_id: str) -> str:
    problem = session_id_problem(session_id)
    if problem is not None:
        raise RampartError(ErrorCode.INVALID_ARGUMENT, problem)
    return session_id


def session_not_found(session_id: str, ttl_s: int) -> RampartError:
    return RampartError(
        ErrorCode.NOT_FOUND,
        f"no session {session_id!r} for this caller: sessions expire {ttl_s} s after their last turn and "
        "belong to the API key's user that started them; omit session_id to start a new one",
    )


class SessionStore(Protocol):
    """Where sessions live between turns."""

    def load(self, principal: Principal, session_id: str) -> Session:
        """The caller's session; NOT_FOUND if it expired, never existed or belongs to someone else."""
        ...

    def save(self, session: Session) -> None:
        """Store (and restart the TTL of) a session."""
        ...

    def close(self) -> None: ...


def build_session_store(settings: SessionSettings) -> SessionStore:
    if settings.backend == "redis":
        from services.orchestrator.conversation.session_redis import RedisSessionStore

        return RedisSessionStore(settings)
    from services.orchestrator.conversation.session_memory import MemorySessionStore

    return MemorySessionStore(settings)
