"""A scripted OpenAI-compatible server on loopback: a real HTTP server whose replies a test chooses
(garbage, errors, silence, a given answer), for the paths a real model cannot be made to take."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Scripted:
    """``http.server`` on 127.0.0.1 answering every POST from ``reply(n)`` (n = request number): a
    (status, body) pair, or a number of seconds to sleep before answering (a silent server)."""

    def __init__(self, reply: Callable[[int], tuple[int, str] | float]) -> None:
        self.requests: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                outer.requests.append({"headers": dict(self.headers), "body": json.loads(body)})
                what = reply(len(outer.requests))
                if isinstance(what, float):
                    time.sleep(what)
                    what = (200, chat(""))
                status, text = what
                data = text.encode()
                with contextlib.suppress(OSError):  # the client may have given up (timeout test)
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> Scripted:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def chat(content: str) -> str:
    """An OpenAI chat-completion body whose message is ``content``."""
    return json.dumps(
        {
            "id": "x",
            "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        }
    )
