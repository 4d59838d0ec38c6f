"""Feedback on results, and the impressions it is checked against: the records, the
:class:`FeedbackStore` Protocol, the rule that admits feedback, and the one factory.

An **impression** is what one search or answer showed one principal: its request id, the query, and
the returned results in rank order. The gateway records it after every search and answer; feedback
(``POST /v1/feedback``) names a request id and results of it, and is taken only when the caller's own
impression of that request lists them. Impressions are keyed by (tenant, user, request id): another
principal's request id is simply not there, so refusing it says nothing about whether it exists
(docs/learning.md, "Feedback", has why impressions rather than signed tokens).

Usage::

    store = build_feedback_store(settings)          # RampartSettings: backend and data_dir
    store.remember(Impression.of(...))              # after a search
    imp = store.impression("acme", "alice", rid)    # at feedback time
    store.append(admit(imp, rid, items, now=time.time(), ...))
    for event in store.export("acme", since=t0): ...
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from services.common.errors import ErrorCode, RampartError

if TYPE_CHECKING:
    from services.common.settings import RampartSettings

Label = Literal["relevant", "not_relevant", "clicked"]
LABELS: tuple[Label, ...] = ("relevant", "not_relevant", "clicked")


@dataclass(frozen=True)
class Shown:
    """One result as the principal saw it."""

    chunk_id: str
    doc_id: str
    rank: int


@dataclass(frozen=True)
class Impression:
    tenant: str
    user: str
    request_id: str
    action: str  # search | answer
    query: str
    results: tuple[Shown, ...]
    created: float
    expires: float  # feedback after this is refused as expired

    def to_json(self) -> str:
        data = asdict(self)
        data["results"] = [[s.chunk_id, s.doc_id, s.rank] for s in self.results]
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Impression:
        data = json.loads(text)
        data["results"] = tuple(Shown(c, d, int(r)) for c, d, r in data["results"])
        return cls(**data)


@dataclass(frozen=True)
class FeedbackItem:
    """One label as the request gave it."""

    chunk_id: str
    label: Label
    comment: str | None = None


@dataclass(frozen=True)
class FeedbackEvent:
    """One stored label: who gave it, on which result of which request, and what that request asked
    (training pairs need the query; the impression expires, the event does not)."""

    tenant: str
    user: str
    credential: str  # "key:<id>" or "oidc:<tenant>:<user>": which credential gave it
    request_id: str  # the search or answer that showed the result
    feedback_request_id: str  # the POST /v1/feedback that gave it
    action: str
    query: str
    chunk_id: str
    doc_id: str
    rank: int
    label: Label
    comment: str | None
    time: float
    id: str = field(default="")  # the store's: SQLite rowid, or <Redis stream entry id>/<n>

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes, event_id: str = "") -> FeedbackEvent:
        return cls.from_dict(json.loads(text), event_id)

    @classmethod
    def from_dict(cls, data: dict[str, Any], event_id: str = "") -> FeedbackEvent:
        return cls(**{**data, "id": event_id or data.get("id", "")})


class FeedbackStore(Protocol):
    """Durable feedback events and expiring impressions, per tenant."""

    def remember(self, impression: Impression) -> None:
        """Record what a search or answer showed (replaces the same principal's same request id)."""
        ...

    def impression(self, tenant: str, user: str, request_id: str) -> Impression | None:
        """That principal's impression of ``request_id`` (expired ones too, for a while), else None."""
        ...

    def append(self, events: Sequence[FeedbackEvent]) -> None:
        """Store ``events`` durably, all or none."""
        ...

    def export(
        self, tenant: str | None = None, since: float | None = None, until: float | None = None
    ) -> Iterator[FeedbackEvent]:
        """Events of ``tenant`` (every tenant: None) with ``since <= time < until``, oldest first."""
        ...

    def check(self) -> None:
        """Raise ``RampartError(UNAVAILABLE)`` if the store cannot serve (start-up check)."""
        ...

    def close(self) -> None: ...


def unknown_request(request_id: str) -> RampartError:
    """The one answer for a request id this principal was not shown: never seen, another principal's,
    or forgotten (the same words for each, so it says nothing about other principals' requests)."""
    return RampartError(
        ErrorCode.NOT_FOUND,
        f"request_id {request_id!r} is not a search or answer of yours that the gateway remembers; send "
        "the request_id of a /v1/search or /v1/answer response you received, within feedback.impression_ttl_s",
        field="request_id",
    )


def admit(
    imp: Impression | None,
    request_id: str,
    items: Sequence[FeedbackItem],
    *,
    credential: str,
    feedback_request_id: str,
    now: float | None = None,
) -> list[FeedbackEvent]:
    """The events for ``items`` on ``imp``, or the 404 that refuses them all: unknown request id,
    expired impression, or a result it did not show (the first one, named with the fix)."""
    now = time.time() if now is None else now
    if imp is None:
        raise unknown_request(request_id)
    if now >= imp.expires:
        raise RampartError(
            ErrorCode.NOT_FOUND,
            f"request_id {request_id!r} expired at {_iso(imp.expires)}: feedback is taken for "
            f"{round(imp.expires - imp.created)} s after the search (feedback.impression_ttl_s); search "
            "again and give feedback on the new response",
            field="request_id",
        )
    shown = {s.chunk_id: s for s in imp.results}
    out = []
    for n, item in enumerate(items):
        hit = shown.get(item.chunk_id)
        if hit is None:
            raise RampartError(
                ErrorCode.NOT_FOUND,
                f"feedback[{n}].chunk_id {item.chunk_id!r} was not among the results request_id "
                f"{request_id!r} returned to you; use a results[].chunk_id of that response",
                field=f"feedback[{n}].chunk_id",
            )
        out.append(
            FeedbackEvent(
                tenant=imp.tenant,
                user=imp.user,
                credential=credential,
                request_id=request_id,
                feedback_request_id=feedback_request_id,
                action=imp.action,
                query=imp.query,
                chunk_id=hit.chunk_id,
                doc_id=hit.doc_id,
                rank=hit.rank,
                label=item.label,
                comment=item.comment,
                time=now,
            )
        )
    return out


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def build_feedback_store(settings: RampartSettings) -> FeedbackStore:
    """The one factory: Redis streams when ``feedback.backend`` is ``redis`` (gateway replicas share
    them), else SQLite in ``data_dir`` (the embedded default). Nothing connects or opens until used."""
    fb = settings.feedback
    if fb.backend == "redis":
        from services.learning.feedback_redis import RedisFeedbackStore

        assert fb.redis_url is not None  # FeedbackSettings refuses redis without a URL
        return RedisFeedbackStore(fb.redis_url.get_secret_value(), retention_s=2 * fb.impression_ttl_s)
    from services.learning.feedback_sqlite import SqliteFeedbackStore

    return SqliteFeedbackStore(settings.data_dir / "feedback.sqlite3", retention_s=2 * fb.impression_ttl_s)
