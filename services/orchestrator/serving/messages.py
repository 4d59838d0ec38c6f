"""What the orchestrator receives and returns, in-process and across Ray Serve handles.

The gateway authenticates and passes the :class:`Principal`; the orchestrator trusts it and never sees
an API key. A :class:`PipelineReply` carries either a response or an error, because a
``RampartError`` raised inside a Ray replica does not survive Ray's exception serialisation (its
constructor takes keyword details); the caller turns the error back into one with :meth:`unwrap`.
A Serve handle call carries no OpenTelemetry context, so the request carries it (``trace_context``).
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from services.api.schemas import AnswerRequest, AnswerResponse, ErrorBody, SearchRequest, SearchResponse
from services.common.errors import ErrorCode, RampartError
from services.common.types import REQUEST_ID_PATTERN, Principal, Strict


class PipelineSearchRequest(Strict):
    """One search as the gateway forwards it: who asks (already authenticated) and what."""

    principal: Principal = Field(description="The authenticated caller; the gateway vouches for it")
    request: SearchRequest
    request_id: str | None = Field(
        default=None, pattern=REQUEST_ID_PATTERN, description="The gateway's request id, for the logs"
    )
    trace_context: dict[str, str] = Field(
        default_factory=dict,
        max_length=8,
        description="W3C trace context (traceparent, tracestate) of the caller's span, so the replica's "
        "spans join the request's trace across a Serve handle; empty over HTTP (the header carries it)",
    )


class PipelineAnswerRequest(Strict):
    """One question as the gateway forwards it (``/v1/answer``)."""

    principal: Principal = Field(description="The authenticated caller; the gateway vouches for it")
    request: AnswerRequest
    request_id: str | None = Field(
        default=None, pattern=REQUEST_ID_PATTERN, description="The gateway's request id, for the logs"
    )
    trace_context: dict[str, str] = Field(
        default_factory=dict,
        max_length=8,
        description="W3C trace context (traceparent, tracestate) of the caller's span, so the replica's "
        "spans join the request's trace across a Serve handle; empty over HTTP (the header carries it)",
    )


class PipelineReply(BaseModel):
    """A response or an error, never both; ``status`` is the HTTP status the gateway should answer."""

    response: SearchResponse | None = None
    answer: AnswerResponse | None = None
    error: ErrorBody | None = None
    status: int = 200

    @classmethod
    def ok(cls, response: SearchResponse | AnswerResponse) -> PipelineReply:
        if isinstance(response, AnswerResponse):
            return cls(answer=response)
        return cls(response=response)

    @classmethod
    def failed(cls, exc: RampartError) -> PipelineReply:
        body = ErrorBody(code=exc.code.value, message=exc.message, details=exc.details)
        return cls(error=body, status=exc.http_status)

    def unwrap(self) -> SearchResponse:
        """The search response, or the error raised again as the ``RampartError`` it was."""
        if self.response is not None:
            return self.response
        raise self._error()

    def unwrap_answer(self) -> AnswerResponse:
        """The answer response, or the error raised again as the ``RampartError`` it was."""
        if self.answer is not None:
            return self.answer
        raise self._error()

    def _error(self) -> RampartError:
        err = self.error or ErrorBody(code=ErrorCode.INTERNAL.value, message="empty pipeline reply")
        return RampartError(ErrorCode(err.code), err.message, **err.details)
