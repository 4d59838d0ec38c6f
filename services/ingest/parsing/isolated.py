"""Parsing under a time budget: each document is parsed in a child process that is killed past it.

Why a process and not a thread or checks in loops: the parsers are third-party code (pypdf, python-docx
and lxml, selectolax, markdown-it-py) that we can neither interrupt nor instrument, and a thread that
runs past its budget cannot be stopped; it keeps the GIL and freezes every tenant's requests. A child
process can be killed. docs/security.md ("Bounded time") gives the decision and its measured cost.

One child serves document after document (started on first use as ``python -m`` of this module, so it
inherits no threads of a gRPC or HTTP server and runs none of the parent's start-up; it imports the
parent's ``sys.path``); past ``timeout_s`` it is killed (SIGKILL) and the document fails with a
:class:`RampartError` naming the budget and the setting; the next document gets a fresh child (about
0.3 s to start). A child that dies on its own (a crash in a C extension, the OOM killer) fails only the
document it was parsing.

Usage::

    parser = IsolatedParser(timeout_s=60)
    parsed = parser.parse_text("# Title\n\ntext", "text/markdown")   # or parse_bytes(data, ...)
    parser.close()
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

from services.common.errors import ErrorCode, RampartError
from services.common.types import ParsedDocument

log = logging.getLogger(__name__)


def _serve(inbound: Connection, outbound: Connection) -> None:
    """The child: parse each request, answer ``("ok", ParsedDocument dump)`` or ``("error", code,
    message, details)``, until the pipe closes."""
    from services.ingest.parsing import parse_bytes, parse_text

    outbound.send(("ready",))
    while True:
        try:
            kind, payload, content_type, filename = inbound.recv()
        except (EOFError, OSError):
            return
        try:
            if kind == "text":
                parsed = parse_text(payload, content_type or "text/plain")
            else:
                parsed = parse_bytes(payload, filename=filename, content_type=content_type)
            reply: tuple[Any, ...] = ("ok", parsed.model_dump())
        except RampartError as exc:
            reply = ("error", exc.code.value, exc.message, exc.details)
        except Exception as exc:  # parse_* wrap parser errors; this is a bug in them
            reply = ("error", ErrorCode.INTERNAL.value, f"{type(exc).__name__}: {exc}", {})
        outbound.send(reply)


class _Child:
    """A parser process and the two ends of its pipes."""

    def __init__(self) -> None:
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        try:
            self.proc = subprocess.Popen(  # noqa: S603  # our own interpreter and module, no shell
                [sys.executable, "-m", __name__, str(to_child_r), str(from_child_w)],
                pass_fds=(to_child_r, from_child_w),
                env=env,
                stdin=subprocess.DEVNULL,
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
        self.send = Connection(to_child_w, readable=False)
        self.recv = Connection(from_child_r, writable=False)

    def stop(self) -> None:
        self.send.close()
        self.recv.close()
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(5.0)
        except subprocess.TimeoutExpired:
            log.warning("parser process %d did not exit after SIGKILL", self.proc.pid)


class IsolatedParser:
    """Thread-safe (one document at a time); ``timeout_s`` is the wall-clock budget per document."""

    def __init__(self, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}; parse in-process instead")
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self.restarts = 0  # children killed or lost so far (for tests and logs)

    def parse_text(self, text: str, content_type: str) -> ParsedDocument:
        return self._parse(("text", text, content_type, None))

    def parse_bytes(
        self, data: bytes, *, filename: str | None = None, content_type: str | None = None
    ) -> ParsedDocument:
        return self._parse(("bytes", data, content_type, filename))

    def close(self) -> None:
        with self._lock:
            self._stop()

    def _parse(self, request: tuple[Any, ...]) -> ParsedDocument:
        with self._lock:
            started = time.monotonic()
            reply: tuple[Any, ...] | None = None
            answered = True
            try:
                child = self._running()
                child.send.send(request)
                answered = child.recv.poll(self.timeout_s)
                reply = child.recv.recv() if answered else None
            except (EOFError, OSError):
                reply = None  # the child died: below
            if reply is None:
                self._lost(answered, time.monotonic() - started)
        assert reply is not None
        if reply[0] == "ok":
            return ParsedDocument.model_validate(reply[1])
        _, code, message, details = reply
        raise RampartError(ErrorCode(code), message, **details)

    def _lost(self, answered: bool, elapsed: float) -> None:
        """Stop the child (killed past the budget, or dead) and raise the document's failure."""
        exit_code = None
        if self._child is not None and answered:
            # the pipe closes as the child dies, a moment before the kernel has its exit status
            try:
                exit_code = self._child.proc.wait(_REAP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                exit_code = None
        self._stop()
        self.restarts += 1
        if not answered:
            log.warning("parsing stopped past its budget", extra={"budget_s": self.timeout_s})
            raise RampartError(
                ErrorCode.DEADLINE_EXCEEDED,
                f"parsing the document took longer than its budget of {self.timeout_s:g} s and was "
                "stopped; simplify or split the document, or raise RAMPART_PARSING__TIMEOUT_S",
                budget_s=self.timeout_s,
            )
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT,
            f"the parser process died after {elapsed:.1f} s on this document (exit code {exit_code}); "
            "check that the file is not corrupt, or re-export it",
            exit_code=exit_code,
        )

    def _running(self) -> _Child:
        """The live child, started (and waited for: imports are not the document's time) if needed."""
        if self._child is not None and self._child.proc.poll() is None:
            return self._child
        self._stop()
        child = _Child()
        self._child = child
        if not child.recv.poll(_START_TIMEOUT_S) or child.recv.recv() != ("ready",):
            self._stop()
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"the parser process did not start within {_START_TIMEOUT_S:g} s; check the server's "
                "load and that `python -m services.ingest.parsing.isolated` runs",
            )
        return child

    def _stop(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            child.stop()


_START_TIMEOUT_S = 60.0
_REAP_TIMEOUT_S = 5.0  # how long a dead child's exit status may take to be known


def main(argv: list[str]) -> int:
    """Child entry point: ``python -m services.ingest.parsing.isolated <read fd> <write fd>``."""
    _serve(Connection(int(argv[0]), writable=False), Connection(int(argv[1]), readable=False))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
