"""Errors as ``{code, message, details}``: the statuses the API documents and the handlers that
answer every failure in that shape (a ``RampartError``, invalid input, an unknown route, a bug)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.api.schemas import ErrorBody
from services.common import metrics as rampart_metrics
from services.common.errors import ErrorCode, RampartError
from services.common.http_errors import error_response, invalid_request, routing_error_response

log = logging.getLogger("services.gateway.app")  # the logger these handlers have always used

# Every status a /v1 operation may answer besides 200, each with the body it has. 412: a well-formed
# request the tenant's configuration does not allow (a link option for a generic corpus profile);
# 500/504: a bug, or the stack's orchestrator past its deadline.
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody} for code in (400, 401, 403, 404, 409, 412, 413, 429, 500, 503, 504)
}


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RampartError)
    async def rampart_error(request: Request, exc: RampartError) -> JSONResponse:
        rampart_metrics.record_http_error(exc.code)
        headers = (
            {"retry-after": str(int(exc.details.get("retry_after_s", 1)) + 1)}
            if (exc.code is ErrorCode.RATE_LIMITED)
            else None
        )
        if exc.code is ErrorCode.UNAUTHENTICATED:
            headers = {"www-authenticate": "Bearer"}
        return error_response(exc, headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        rampart_metrics.record_http_error(ErrorCode.INVALID_ARGUMENT)
        return error_response(invalid_request(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return routing_error_response(exc, request.method, request.url.path)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", extra={"request_id": getattr(request.state, "request_id", "")})
        rampart_metrics.record_http_error(ErrorCode.INTERNAL)
        return error_response(
            RampartError(
                ErrorCode.INTERNAL, "internal error; the request id in x-request-id identifies it in the logs"
            )
        )
