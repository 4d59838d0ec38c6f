"""Settings of conversations: :class:`SessionSettings` (``sessions``), read by
:func:`~services.orchestrator.conversation.sessions.build_session_store` and the stores, and by the
conversational rewrite (``alpha``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class SessionSettings(BaseModel):
    """Conversation sessions and their fact graph (AdaptiveRAG, papers.md §4)."""

    backend: Literal["memory", "redis"] = Field(
        default="memory", description="memory: this process (embedded); redis: shared (distributed)"
    )
    redis_url: str = Field(default="redis://127.0.0.1:6379/2", description="Session store when backend=redis")
    ttl_s: int = Field(
        default=1800, ge=1, le=7 * 24 * 3600, description="A session expires this long after its last turn"
    )
    max_turns: int = Field(default=20, ge=1, le=200, description="Turns kept (older ones are dropped)")
    alpha: float = Field(
        default=0.6, ge=0.0, le=1.0, description="Fact relevance = alpha*similarity + (1-alpha)*proximity"
    )
    max_sessions: int = Field(
        default=10_000, ge=1, le=10_000_000, description="Sessions kept in memory (backend=memory)"
    )
