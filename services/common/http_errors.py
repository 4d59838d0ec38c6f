"""One mapping from FastAPI's request validation errors to Rampart's error body, for every HTTP app
(the gateway and the orchestrator ingress answer bad input alike: 400, the first problem in the
message, up to 20 in ``details.errors``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.common.errors import HTTP_STATUS, ErrorCode, RampartError

MAX_PROBLEMS = 20
OBJECT_TYPES = ("model_attributes_type", "dict_type", "model_type")  # "the body is not an object"
SEND_JSON = "send a JSON object with content-type: application/json"


def _problem(e: Mapping[str, Any]) -> dict[str, str]:
    """One pydantic error as ``{field, problem, type}``; problems with the body as a whole say what a
    body must be (pydantic would report a JSON offset as a field, or "a valid dictionary")."""
    loc = tuple(e.get("loc", ()))
    kind = str(e.get("type", ""))
    problem = str(e.get("msg", ""))
    if kind == "json_invalid":
        at = next((p for p in loc[1:] if isinstance(p, int)), None)
        reason = str((e.get("ctx") or {}).get("error", "")) or "decode error"
        where = f"at character {at}: " if at is not None else ""
        return {
            "field": "body",
            "problem": f"request body is not valid JSON ({where}{reason}); {SEND_JSON}",
            "type": kind,
        }
    if loc == ("body",) and kind == "missing":
        problem = f"request body is missing; {SEND_JSON}"
    elif loc == ("body",) and isinstance(e.get("input"), bytes | str) and kind not in OBJECT_TYPES:
        # no or another content-type: the raw body arrived as text
        problem = f"request body was not read as JSON (content-type missing or not JSON); {SEND_JSON}"
    elif loc == ("body",) and kind in OBJECT_TYPES:
        problem = f"request body must be a JSON object, not {type(e.get('input')).__name__}; {SEND_JSON}"
    elif isinstance(e.get("input"), bool) and kind in ("int_type", "float_type"):
        value = "true" if e["input"] else "false"
        example = "an integer such as 10" if kind == "int_type" else "a number such as 0.5"
        problem = f"{problem}, not {value}; send {example} (a boolean is not a number)"
    return {"field": ".".join(str(p) for p in loc), "problem": problem, "type": kind}


def invalid_request(exc: RequestValidationError) -> RampartError:
    """The validation failure as INVALID_ARGUMENT naming each bad field, its problem and pydantic's type."""
    problems = [_problem(e) for e in exc.errors()[:MAX_PROBLEMS]]
    first = problems[0] if problems else {"field": "body", "problem": "invalid"}
    return RampartError(
        ErrorCode.INVALID_ARGUMENT, f"invalid request: {first['field']}: {first['problem']}", errors=problems
    )


def http_exception_error(status: int, detail: str, method: str, path: str, allow: str | None) -> RampartError:
    """A routing failure (Starlette's 404/405...) as a RampartError: 405 is ``method_not_allowed``
    naming the methods the path takes (never ``invalid_argument``, which means 400)."""
    if status == 405:
        methods = allow or "another method"
        return RampartError(
            ErrorCode.METHOD_NOT_ALLOWED,
            f"method {method} is not allowed on {path}; use {methods}",
            method=method,
            allow=[m.strip() for m in (allow or "").split(",") if m.strip()],
        )
    if status == 400:  # FastAPI could not decode the body (e.g. not UTF-8)
        return RampartError(ErrorCode.INVALID_ARGUMENT, f"{detail}; {SEND_JSON} (UTF-8)")
    by_status = {v: k for k, v in HTTP_STATUS.items()}
    code = by_status.get(status, ErrorCode.INVALID_ARGUMENT if status < 500 else ErrorCode.INTERNAL)
    return RampartError(code, detail)


def error_response(exc: RampartError, headers: dict[str, str] | None = None) -> JSONResponse:
    """``exc`` as its JSON body with its HTTP status."""
    return JSONResponse(exc.to_dict(), status_code=exc.http_status, headers=headers)


def routing_error_response(exc: StarletteHTTPException, method: str, path: str) -> JSONResponse:
    """Starlette's own 404/405/400 in the house error shape, keeping its headers (``Allow`` on 405)."""
    headers = dict(exc.headers or {})
    allow = next((v for k, v in headers.items() if k.lower() == "allow"), None)
    error = http_exception_error(exc.status_code, str(exc.detail), method, path, allow)
    return JSONResponse(error.to_dict(), status_code=exc.status_code, headers=headers or None)
