"""Settings of the feedback store: :class:`FeedbackSettings` (``feedback``), read by the gateway (which
records impressions and takes feedback) and by ``rampart feedback export``."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, SecretStr, model_validator

# Bounds the request schema states (services/api/feedback.py): a comment is a remark, not a document,
# and one call labels at most a page of results (gateway.max_top_k is 100 by default).
MAX_COMMENT_CHARS = 1000
MAX_FEEDBACK_ITEMS = 100


class FeedbackSettings(BaseModel):
    """Where feedback and the impressions it is checked against are kept (docs/learning.md)."""

    backend: Literal["sqlite", "redis"] = Field(
        default="sqlite",
        description="sqlite: <data_dir>/feedback.sqlite3 beside the embedded index (one gateway process); "
        "redis: a stream per tenant in redis_url, shared by every gateway replica",
    )
    redis_url: SecretStr | None = Field(
        default=None,
        description="Redis URL of the redis backend (the gateway's ACL user: keys rampart:feedback:*); "
        "Redis must persist (appendonly) for feedback to be durable",
    )
    impression_ttl_s: int = Field(
        default=7 * 86400,
        ge=60,
        le=90 * 86400,
        description="How long after a search or answer its results take feedback; the record is kept as "
        "long again so that late feedback is told 'expired' rather than 'unknown'",
    )

    @model_validator(mode="after")
    def _redis_needs_url(self) -> FeedbackSettings:
        if self.backend == "redis" and self.redis_url is None:
            raise ValueError(
                "feedback.backend is 'redis' but feedback.redis_url is unset; set RAMPART_FEEDBACK__REDIS_URL "
                "(the gateway's Redis user) or RAMPART_FEEDBACK__BACKEND=sqlite"
            )
        return self
