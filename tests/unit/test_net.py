"""free_port never hands out one port twice: a stack plans a dozen listeners from it."""

from __future__ import annotations

import socket

import pytest

from services.common import net


def test_a_port_the_os_repeats_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    picks = iter([40001, 40001, 40001, 40002])
    monkeypatch.setattr(net, "_os_pick", lambda: next(picks))
    monkeypatch.setattr(net, "_handed_out", set())
    assert net.free_port() == 40001
    assert net.free_port() == 40002


def test_gives_up_clearly_when_every_pick_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(net, "_os_pick", lambda: 40001)
    monkeypatch.setattr(net, "_handed_out", {40001})
    with pytest.raises(RuntimeError, match="ip_local_port_range"):
        net.free_port()


def test_real_ports_are_distinct_and_bindable() -> None:
    ports = [net.free_port() for _ in range(50)]
    assert len(set(ports)) == 50
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))
