"""One mapping from FastAPI's request validation errors to Rampart's error body, for every HTTP app
(the gateway and the orchestrator ingress answer bad input alike: 400, the first problem in the
message, up to 20 in ``details.errors``)."""

from __future__ import annotations

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from services.common.errors import ErrorCode, RampartError

MAX_PROBLEMS = 20


def invalid_request(exc: RequestValidationError) -> RampartError:
    """The validation failure as INVALID_ARGUMENT naming each bad field, its problem and pydantic's type."""
    problems = [
        {
            "field": ".".join(str(p) for p in e.get("loc", ())),
            "problem": e.get("msg", ""),
            "type": e.get("type", ""),
        }
        for e in exc.errors()[:MAX_PROBLEMS]
    ]
    first = problems[0] if problems else {"field": "body", "problem": "invalid"}
    return RampartError(
        ErrorCode.INVALID_ARGUMENT, f"invalid request: {first['field']}: {first['problem']}", errors=problems
    )


def error_response(exc: RampartError, headers: dict[str, str] | None = None) -> JSONResponse:
    """``exc`` as its JSON body with its HTTP status."""
    return JSONResponse(exc.to_dict(), status_code=exc.http_status, headers=headers)
