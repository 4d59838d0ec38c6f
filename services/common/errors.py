"""One error type with stable codes, mapped once to HTTP and once to gRPC.

Every layer raises :class:`RampartError`; the gateway turns it into ``{code, message, details}``
and the gRPC services (later) into a status with details. Messages name the bad value and the fix.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class ErrorCode(StrEnum):
    INVALID_ARGUMENT = "invalid_argument"
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission_denied"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"  # HTTP only: the path exists, not with this method
    CONFLICT = "conflict"
    PAYLOAD_TOO_LARGE = "payload_too_large"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    RATE_LIMITED = "rate_limited"
    UNAVAILABLE = "unavailable"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    FAILED_PRECONDITION = "failed_precondition"
    INTERNAL = "internal"


HTTP_STATUS: dict[ErrorCode, int] = {
    ErrorCode.INVALID_ARGUMENT: 400,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.PERMISSION_DENIED: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.CONFLICT: 409,
    ErrorCode.PAYLOAD_TOO_LARGE: 413,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
    ErrorCode.RATE_LIMITED: 429,
    ErrorCode.FAILED_PRECONDITION: 412,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.DEADLINE_EXCEEDED: 504,
    ErrorCode.INTERNAL: 500,
}

# Names of ``grpc.StatusCode`` members; kept as strings so this module never imports grpc.
GRPC_STATUS: dict[ErrorCode, str] = {
    ErrorCode.INVALID_ARGUMENT: "INVALID_ARGUMENT",
    ErrorCode.UNAUTHENTICATED: "UNAUTHENTICATED",
    ErrorCode.PERMISSION_DENIED: "PERMISSION_DENIED",
    ErrorCode.NOT_FOUND: "NOT_FOUND",
    ErrorCode.METHOD_NOT_ALLOWED: "UNIMPLEMENTED",
    ErrorCode.CONFLICT: "ALREADY_EXISTS",
    ErrorCode.PAYLOAD_TOO_LARGE: "RESOURCE_EXHAUSTED",
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: "INVALID_ARGUMENT",
    ErrorCode.RATE_LIMITED: "RESOURCE_EXHAUSTED",
    ErrorCode.FAILED_PRECONDITION: "FAILED_PRECONDITION",
    ErrorCode.UNAVAILABLE: "UNAVAILABLE",
    ErrorCode.DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED",
    ErrorCode.INTERNAL: "INTERNAL",
}


class RampartError(Exception):
    """An expected failure with a stable ``code``; ``details`` must never carry secrets."""

    def __init__(self, code: ErrorCode, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details: dict[str, Any] = details

    @property
    def http_status(self) -> int:
        return HTTP_STATUS[self.code]

    @property
    def grpc_status(self) -> str:
        return GRPC_STATUS[self.code]

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code.value, "message": self.message, "details": self.details}

    def __repr__(self) -> str:
        return f"RampartError({self.code.value!r}, {self.message!r}, {self.details!r})"


def invalid(message: str, **details: Any) -> RampartError:
    return RampartError(ErrorCode.INVALID_ARGUMENT, message, **details)
