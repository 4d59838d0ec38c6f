"""A real OTLP/HTTP receiver for trace tests: ``oteltap`` (PyPI), listening on 127.0.0.1.

oteltap's API is asyncio; the tests are synchronous, so the receiver runs on its own event loop in a
daemon thread and every span it receives is kept in a list the test reads (:meth:`spans`,
:meth:`wait_for`). Processes under test export to it with the standard variables of :meth:`env`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span
from oteltap import OtelTapHttpProtobufReceiver, OtelTapHttpProtobufReceiverSettings

from services.common.net import free_port


class OtlpReceiver:
    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self._spans: list[Span] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="otlp-receiver", daemon=True)
        self._receiver: OtelTapHttpProtobufReceiver | None = None
        self._collector: concurrent.futures.Future[None] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self, delay_ms: int = 50) -> dict[str, str]:
        """``OTEL_*`` variables that make a Rampart process export its spans here, promptly."""
        return {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.endpoint,
            "OTEL_BSP_SCHEDULE_DELAY": str(delay_ms),
        }

    def start(self, timeout_s: float = 10.0) -> OtlpReceiver:
        self._thread.start()
        settings = OtelTapHttpProtobufReceiverSettings(http_port=self.port)
        receiver = OtelTapHttpProtobufReceiver(settings)
        asyncio.run_coroutine_threadsafe(receiver.start(), self._loop).result(timeout_s)
        self._receiver = receiver
        ready = threading.Event()
        self._collector = asyncio.run_coroutine_threadsafe(self._collect(receiver, ready), self._loop)
        if not ready.wait(timeout_s):
            raise TimeoutError(f"oteltap on port {self.port} did not start streaming in {timeout_s} s")
        return self

    async def _collect(self, receiver: OtelTapHttpProtobufReceiver, ready: threading.Event) -> None:
        stream = receiver.stream_traces()
        first = asyncio.ensure_future(stream.__anext__())  # subscribes before we say ready
        await asyncio.sleep(0)
        ready.set()
        try:
            span = await first
            while True:
                with self._lock:
                    self._spans.append(span)
                span = await stream.__anext__()
        except StopAsyncIteration:
            return

    def stop(self) -> None:
        if self._receiver is not None:
            asyncio.run_coroutine_threadsafe(self._receiver.stop(), self._loop).result(10)
            self._receiver = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    def spans(self, trace_id: str | None = None) -> list[Span]:
        """Every span received so far, or those of one trace (32 hex digits)."""
        with self._lock:
            got = list(self._spans)
        return [s for s in got if trace_id is None or s.trace_id.hex() == trace_id]

    def wait_for(
        self, done: Callable[[list[Span]], bool], trace_id: str | None = None, timeout_s: float = 20.0
    ) -> list[Span]:
        """Poll until ``done(spans)`` holds for the received spans (of ``trace_id``); return them.

        On timeout, fail the test listing what did arrive: a missing span is then obvious.
        """
        end = time.monotonic() + timeout_s
        while True:
            spans = self.spans(trace_id)
            if done(spans):
                return spans
            if time.monotonic() > end:
                names = sorted(s.name for s in spans)
                pytest.fail(f"spans of trace {trace_id} after {timeout_s} s: {names}")
            time.sleep(0.05)


def has_names(names: Sequence[str]) -> Callable[[list[Span]], bool]:
    """A :meth:`OtlpReceiver.wait_for` condition: every name in ``names`` has arrived."""
    return lambda spans: set(names) <= {s.name for s in spans}


@pytest.fixture(name="otlp_receiver")
def otlp_receiver_fixture() -> Iterator[OtlpReceiver]:
    """oteltap on a free loopback port for one test (import this into a test module to use it)."""
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()
