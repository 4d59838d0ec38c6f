"""The ``SessionStore`` contract (services/orchestrator/conversation/sessions.py): what a conversation
may rely on from where its sessions live, in this process or shared. Subclass
:class:`SessionStoreContract` in the implementation's own test file and provide ``make_store``
(tests/README.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal
from services.orchestrator.conversation.sessions import SessionStore, Turn, new_session

ALICE = Principal(tenant="acme", user="alice")
MAKE_STORE = Callable[..., SessionStore]  # make_store(ttl_s=…) -> a fresh store, closed at teardown


def not_found(store: SessionStore, principal: Principal, session_id: str) -> RampartError:
    with pytest.raises(RampartError) as exc:
        store.load(principal, session_id)
    assert exc.value.code is ErrorCode.NOT_FOUND, exc.value.message
    return exc.value


class SessionStoreContract:
    """Every ``SessionStore`` keeps these promises: a session loads as it was saved (turns and fact
    graph), only for the principal that started it; another principal's id, an unknown id and an
    expired one are the same ``NOT_FOUND`` (nothing says whether it exists); a malformed id is
    ``INVALID_ARGUMENT``; a session expires ``ttl_s`` after it was last saved, each save restarting
    the clock; a loaded session is the caller's copy, stored again only by ``save``.

    Provide ``make_store``: called with the ``SessionSettings`` fields to set (``ttl_s``), it returns
    a new store of the implementation under test, and closes every store it made at teardown.
    """

    @pytest.fixture()
    def make_store(self) -> MAKE_STORE:
        raise NotImplementedError(
            f"{type(self).__name__} must provide the make_store fixture: make_store(ttl_s=…) returns a "
            "new store of the implementation under test (tests/README.md)"
        )

    def test_a_session_loads_as_it_was_saved(self, make_store: MAKE_STORE) -> None:
        store = make_store()
        s = new_session(ALICE)
        s.graph.update(["Dune"], ["Frank Herbert"])
        s.add_turn(Turn(query="Who wrote Dune?", rewritten="Who wrote Dune?", route="simple"), max_turns=5)
        store.save(s)
        got = store.load(ALICE, s.id)
        assert got.history() == ["Who wrote Dune?"] and "frank herbert" in got.graph.facts
        assert (got.id, got.tenant, got.user, got.turns[0].route) == (s.id, "acme", "alice", "simple")
        got.add_turn(Turn(query="And his son?", rewritten="And Frank Herbert's son?"), max_turns=5)
        assert store.load(ALICE, s.id).history() == ["Who wrote Dune?"]  # not saved: not stored
        store.save(got)
        assert store.load(ALICE, s.id).history() == ["Who wrote Dune?", "And Frank Herbert's son?"]

    def test_sessions_are_scoped_to_their_principal(self, make_store: MAKE_STORE) -> None:
        store = make_store()
        s = new_session(ALICE)
        s.add_turn(Turn(query="q", rewritten="q"), max_turns=5)
        others = (
            Principal(tenant="acme", user="mallory"),
            Principal(tenant="acme", user="bob"),
            Principal(tenant="globex", user="alice"),
        )
        before = [not_found(store, other, s.id).message for other in others]  # not saved yet
        store.save(s)
        assert store.load(ALICE, s.id).history() == ["q"]
        # the same answer as for an id that does not exist: the error tells nothing about it
        assert [not_found(store, other, s.id).message for other in others] == before

    def test_unknown_and_malformed_ids(self, make_store: MAKE_STORE) -> None:
        store = make_store()
        not_found(store, ALICE, new_session(ALICE).id)  # well-formed, never saved
        for bad in ("../../etc/passwd", "", "s_short", "rampart:session:*"):
            with pytest.raises(RampartError) as exc:
                store.load(ALICE, bad)
            assert exc.value.code is ErrorCode.INVALID_ARGUMENT, bad

    def test_a_session_expires_ttl_after_its_last_save(self, make_store: MAKE_STORE) -> None:
        store = make_store(ttl_s=2)
        s = new_session(ALICE)
        store.save(s)
        time.sleep(1.1)
        store.save(s)  # restarts the clock
        time.sleep(1.1)
        assert store.load(ALICE, s.id).id == s.id  # 2.2 s after the first save, 1.1 s after the last
        time.sleep(2.1)
        not_found(store, ALICE, s.id)
