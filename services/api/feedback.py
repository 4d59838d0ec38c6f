"""The HTTP contract of ``POST /v1/feedback``: labels on results a search or answer returned.

Every rule the gateway enforces on the body's shape is stated here, so the OpenAPI document admits
exactly what is served: the request id's pattern (the one the gateway mints and accepts in
``x-request-id``), the labels, the comment's length, the number of labels per call. What depends on
state (the request id unknown to this principal, expired, a result it did not return) is a 404.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from services.common.types import REQUEST_ID_PATTERN, Strict
from services.learning.config import MAX_COMMENT_CHARS, MAX_FEEDBACK_ITEMS


class FeedbackItemIn(Strict):
    chunk_id: Annotated[str, Field(min_length=1, max_length=256)] = Field(
        description="results[].chunk_id of the response named by request_id"
    )
    label: Literal["relevant", "not_relevant", "clicked"] = Field(
        description="relevant / not_relevant: the user's judgement; clicked: the user opened the result"
    )
    comment: Annotated[str, Field(max_length=MAX_COMMENT_CHARS)] | None = Field(
        default=None, description=f"Optional free text, at most {MAX_COMMENT_CHARS} characters"
    )


class FeedbackRequest(Strict):
    request_id: Annotated[str, Field(pattern=REQUEST_ID_PATTERN)] = Field(
        description="request_id of the /v1/search or /v1/answer response whose results are labelled; yours, "
        "and no older than feedback.impression_ttl_s"
    )
    feedback: list[FeedbackItemIn] = Field(
        min_length=1,
        max_length=MAX_FEEDBACK_ITEMS,
        description=f"1 to {MAX_FEEDBACK_ITEMS} labels; all are stored or none (a result not shown refuses the call)",
    )


class FeedbackResponse(BaseModel):
    accepted: int = Field(description="Labels stored")
    request_id: str = Field(description="The labelled search's or answer's request id")
    feedback_request_id: str = Field(description="This call's own request id (x-request-id)")
