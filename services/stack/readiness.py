"""Wait until a stack serves: every program RUNNING and the gateway's ``/readyz`` reporting each stage
ready (not merely degraded), or fail naming the program that is not and the tail of its log."""

from __future__ import annotations

import time
from typing import Any

import httpx

from services.common.errors import ErrorCode, RampartError
from services.common.internal_auth import INTERNAL_TOKEN_HEADER
from services.common.settings import RampartSettings
from services.stack.control import FATAL, RUNNING, Supervisor


def expected_stages(settings: RampartSettings) -> tuple[str, ...]:
    """``/readyz`` keys that must say ``ready`` in a fully started stack."""
    stages = ["ingest"]
    if settings.rerank.backend != "none":
        stages.append("rerank")
    if settings.factcheck.backend != "none":
        stages.append("factcheck")
    return tuple(stages)


SUPERVISOR_START_S = 15.0  # supervisord writes its pid file and socket within a second or two


def wait_ready(
    sup: Supervisor, gateway_url: str, stages: tuple[str, ...], timeout_s: float, *, token: str
) -> dict[str, Any]:
    """The gateway's per-stage readiness once every stage in ``stages`` is ready; ``token`` (the stack's
    internal token) is what makes the gateway show those details to this caller."""
    started = time.monotonic()
    deadline = started + timeout_s
    last: str = "no answer yet"
    with httpx.Client(timeout=5.0, headers={INTERNAL_TOKEN_HEADER: token}) as client:
        while time.monotonic() < deadline:
            if not sup.running() and time.monotonic() - started > SUPERVISOR_START_S:
                raise RampartError(
                    ErrorCode.UNAVAILABLE,
                    f"supervisord is not running (it exited or never started); {sup.dir / 'supervisord.log'} "
                    f"ends:\n{sup.log_tail('supervisord')}",
                )
            states = sup.states() if sup.running() else []
            failed = [s for s in states if s.state == FATAL]
            if failed:
                name = failed[0].name
                raise RampartError(
                    ErrorCode.UNAVAILABLE,
                    f"stack program {name!r} failed to start ({failed[0].description}); its log "
                    f"{sup.dir / 'logs' / (name + '.log')} ends:\n{sup.log_tail(name)}",
                    program=name,
                )
            try:
                r = client.get(f"{gateway_url}/readyz")
                body = r.json()
                if r.status_code == 200 and all(body.get(s) == "ready" for s in stages):
                    return dict(body)
                last = f"HTTP {r.status_code}: " + ", ".join(f"{s}={body.get(s)!r}" for s in stages)
            except (httpx.HTTPError, ValueError) as exc:
                last = f"gateway not answering ({type(exc).__name__})"
            time.sleep(1.0)
    not_running = [
        f"{s.name}={s.state}" for s in (sup.states() if sup.running() else []) if s.state != RUNNING
    ]
    raise RampartError(
        ErrorCode.DEADLINE_EXCEEDED,
        f"stack not ready after {timeout_s:.0f}s (stack.ready_timeout_s): {last}"
        + (f"; not running: {', '.join(not_running)}" if not_running else "")
        + f"; logs in {sup.dir / 'logs'}",
    )
