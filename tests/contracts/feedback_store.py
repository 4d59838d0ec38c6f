"""The ``FeedbackStore`` contract (services/learning/feedback_store.py): what the gateway and the
learning loop may rely on from where feedback lives, embedded or shared by replicas. Subclass
:class:`FeedbackStoreContract` in the implementation's own test file and provide ``make_store``
(tests/README.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from services.learning.feedback_store import FeedbackEvent, FeedbackStore, Impression, Shown

MAKE_STORE = Callable[..., FeedbackStore]  # make_store(retention_s=…) -> a store over the same storage


def impression(
    tenant: str, user: str, request_id: str, *, age_s: float = 0.0, ttl_s: float = 600.0
) -> Impression:
    created = time.time() - age_s
    shown = (Shown("c1", "d1", 1), Shown("c2", "d2", 2))
    return Impression(tenant, user, request_id, "search", "vacation days", shown, created, created + ttl_s)


def event(
    tenant: str, user: str, label: str = "relevant", *, at: float | None = None, chunk: str = "c1"
) -> FeedbackEvent:
    return FeedbackEvent(
        tenant=tenant, user=user, credential="key:1", request_id="req-0001", feedback_request_id="fb-00001",
        action="search", query="vacation days", chunk_id=chunk, doc_id="d1", rank=1, label=label,  # type: ignore[arg-type]
        comment="ünïcode ✓" if label == "relevant" else None, time=time.time() if at is None else at,
    )  # fmt: skip


class FeedbackStoreContract:
    """Every ``FeedbackStore`` keeps these promises: an impression is found only under the (tenant,
    user, request id) it was recorded for, the latest recording wins, and it is kept ``retention_s``
    from its creation (past its ``expires``, so feedback can be told "expired"), then forgotten; events
    come back as stored (comments in any script), each with an id of the store's, oldest first per
    tenant, filtered by tenant and by ``since <= time < until``; a call's events are stored together;
    and everything survives closing the store and opening it again.

    Provide ``make_store``: called with ``retention_s`` (default one day), it returns a new store over
    the same storage as the others of the test (a second call is a reopen), and closes them at teardown.
    """

    @pytest.fixture()
    def make_store(self) -> MAKE_STORE:
        raise NotImplementedError(
            f"{type(self).__name__} must provide the make_store fixture: make_store(retention_s=…) returns "
            "a new store over the test's storage (tests/README.md)"
        )

    def test_an_impression_is_found_only_for_its_principal(self, make_store: MAKE_STORE) -> None:
        store = make_store()
        store.remember(impression("acme", "alice", "req-0001"))
        got = store.impression("acme", "alice", "req-0001")
        assert got is not None and [s.chunk_id for s in got.results] == ["c1", "c2"]
        assert got.query == "vacation days" and got.results[1].rank == 2
        assert store.impression("acme", "bob", "req-0001") is None
        assert store.impression("globex", "alice", "req-0001") is None
        assert store.impression("acme", "alice", "req-0002") is None

    def test_the_latest_recording_of_a_request_id_wins(self, make_store: MAKE_STORE) -> None:
        store = make_store()
        store.remember(impression("acme", "alice", "req-0001"))
        newer = impression("acme", "alice", "req-0001")
        store.remember(Impression(**{**newer.__dict__, "query": "parental leave"}))
        got = store.impression("acme", "alice", "req-0001")
        assert got is not None and got.query == "parental leave"

    def test_an_expired_impression_is_kept_for_its_retention_then_forgotten(
        self, make_store: MAKE_STORE
    ) -> None:
        store = make_store(retention_s=3600)
        store.remember(impression("acme", "alice", "req-0001", age_s=1200, ttl_s=600))  # expired, retained
        got = store.impression("acme", "alice", "req-0001")
        assert got is not None and got.expires < time.time()
        store.remember(impression("acme", "alice", "req-0002", age_s=7200, ttl_s=600))  # past retention
        assert store.impression("acme", "alice", "req-0002") is None

    def test_events_come_back_as_stored_per_tenant_in_time_order(self, make_store: MAKE_STORE) -> None:
        store = make_store()
        t0 = time.time()
        store.append([event("acme", "alice", at=t0), event("acme", "alice", "clicked", at=t0, chunk="c2")])
        store.append([event("globex", "carol", at=t0 + 1)])
        store.append([event("acme", "bob", "not_relevant", at=t0 + 2)])
        acme = list(store.export("acme"))
        assert [(e.user, e.label, e.chunk_id) for e in acme] == [
            ("alice", "relevant", "c1"), ("alice", "clicked", "c2"), ("bob", "not_relevant", "c1"),
        ]  # fmt: skip
        assert acme[0].comment == "ünïcode ✓" and acme[1].comment is None
        assert acme[0] == FeedbackEvent(**{**event("acme", "alice", at=t0).__dict__, "id": acme[0].id})
        assert all(e.id for e in acme) and len({e.id for e in acme}) == 3
        assert [e.user for e in store.export("globex")] == ["carol"]
        assert sorted(e.tenant for e in store.export()) == ["acme", "acme", "acme", "globex"]
        assert list(store.export("initech")) == []

    def test_export_takes_a_time_range(self, make_store: MAKE_STORE) -> None:
        store = make_store()
        t0 = time.time()
        for n in range(4):
            store.append([event("acme", f"u{n}", at=t0 + 10 * n)])
        assert [e.user for e in store.export("acme", since=t0 + 10)] == ["u1", "u2", "u3"]
        assert [e.user for e in store.export("acme", until=t0 + 20)] == ["u0", "u1"]
        assert [e.user for e in store.export(None, since=t0 + 10, until=t0 + 30)] == ["u1", "u2"]

    def test_everything_survives_a_reopen(self, make_store: MAKE_STORE) -> None:
        first = make_store()
        first.remember(impression("acme", "alice", "req-0001"))
        first.append([event("acme", "alice")])
        first.close()
        again = make_store()
        assert again.impression("acme", "alice", "req-0001") is not None
        assert [e.user for e in again.export("acme")] == ["alice"]
        again.check()
