"""Small network helpers for processes Rampart starts on loopback."""

from __future__ import annotations

import socket
import threading

_MAX_TRIES = 1_000
_handed_out: set[int] = set()
_lock = threading.Lock()


def _os_pick() -> int:
    """A port the OS reports free on 127.0.0.1 right now (it may hand the same one out again later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now and never returned before by this process.

    The OS can give a closed port out again at once, so callers planning several listeners (a stack's
    dozen ports) could get one port twice and see one server fail with "address in use". A race with
    other processes remains possible; within this process, ports are distinct.
    """
    with _lock:
        for _ in range(_MAX_TRIES):
            port = _os_pick()
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError(
        f"no fresh loopback port after {_MAX_TRIES} tries ({len(_handed_out)} already handed out); "
        "is the ephemeral port range exhausted? see /proc/sys/net/ipv4/ip_local_port_range"
    )
