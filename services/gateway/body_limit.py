"""The request body limit, counted on the stream: ``gateway.max_body_bytes`` holds for chunked
uploads and for a ``content-length`` that lies, not only for an honest header.

Why here and not in the route: FastAPI reads the whole body into memory before it validates it, so a
limit checked after parsing has already paid for the memory (a 2 GB chunked upload is 2 GB in the
gateway). This ASGI middleware reads the body from the server itself, chunk by chunk, keeps at most
``max_body_bytes`` of it, and answers 413 the moment the count passes the limit: the rest is never
read (the server then closes the connection, since the request was not consumed). A body within the
limit is replayed to the app unchanged, so nothing behind it can tell.

Usage: ``app.add_middleware(BodyLimit, max_body_bytes=settings.gateway.max_body_bytes)``.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.common import metrics as rampart_metrics
from services.common.errors import ErrorCode, RampartError
from services.common.http_errors import error_response


def too_large(max_body_bytes: int, seen: str) -> RampartError:
    """The 413 every path answers: what was seen, the limit, and the fix."""
    return RampartError(
        ErrorCode.PAYLOAD_TOO_LARGE,
        f"request body of {seen} exceeds the limit of {max_body_bytes} bytes (gateway.max_body_bytes); "
        "send smaller batches",
        limit=max_body_bytes,
    )


class BodyLimit:
    """Pure ASGI middleware: reads an HTTP request's body up to ``max_body_bytes`` and refuses the
    request with 413 as soon as it is longer, whatever ``content-length`` or chunking says."""

    def __init__(self, app: ASGIApp, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = _header(scope, b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_body_bytes):
            # refuse before reading a byte: the header alone says it is too large (or is not a number)
            await self._refuse(scope, receive, send, f"{length} bytes")
            return
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # the client went away mid-upload: nobody to answer
            body = message.get("body", b"")
            size += len(body)
            if size > self.max_body_bytes:
                await self._refuse(scope, receive, send, f"more than {self.max_body_bytes} bytes (streamed)")
                return
            chunks.append(body)
            if not message.get("more_body", False):
                break
        whole = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": whole, "more_body": False}
            return await receive()  # after the body: the server's disconnect notice

        await self.app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, seen: str) -> None:
        rampart_metrics.record_http_error(ErrorCode.PAYLOAD_TOO_LARGE)
        response = error_response(too_large(self.max_body_bytes, seen))
        response.headers["connection"] = "close"  # the unread rest of the body cannot be skipped
        await response(scope, receive, send)


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return bytes(value).decode("latin-1")
    return None
