"""The distributed feedback store: Redis, shared by every gateway replica (``feedback.backend=redis``).

Keys, all under ``rampart:feedback:`` (the gateway's Redis ACL user may touch these and the rate-limit
buckets only, ``services/common/redis_server.ROLE_RULES``):

- ``rampart:feedback:imp:<tenant>:<user>:<request id>``: an impression (JSON), expiring after the
  retention (``2 × feedback.impression_ttl_s``); names cannot hold ``:`` (``NAME_PATTERN``, the
  request-id pattern), so keys cannot collide;
- ``rampart:feedback:events:<tenant>``: a stream per tenant, one entry per feedback call (field ``e``:
  a JSON list of its events; an event's id is ``<entry id>/<n>``), never trimmed: a tenant's export, and later its own training data, is one ``XRANGE``;
- ``rampart:feedback:tenants``: the set of tenants with a stream, for an export of every tenant
  without ``SCAN`` over the keyspace.

Durable only as the Redis is: the stack's and the chart's run with ``appendonly yes``; on ElastiCache
use a replication group with Multi-AZ (docs/learning.md). A Redis that does not answer fails the
feedback call (503), as it fails the rate limits.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, cast

from services.common.errors import ErrorCode, RampartError
from services.common.redis_server import redact_url
from services.learning.feedback_store import FeedbackEvent, Impression

if TYPE_CHECKING:
    import redis

PREFIX = "rampart:feedback:"
TENANTS = PREFIX + "tenants"
PAGE = 1000
# Stream ids are the Redis server's clock in ms; an event's ``time`` is its gateway's. The range read
# is widened by this much and then filtered on ``time``, so replicas' clock skew loses nothing.
SKEW_MS = 60_000


def impression_key(tenant: str, user: str, request_id: str) -> str:
    return f"{PREFIX}imp:{tenant}:{user}:{request_id}"


def stream_key(tenant: str) -> str:
    return f"{PREFIX}events:{tenant}"


class RedisFeedbackStore:
    """Impressions as expiring keys, feedback as one stream per tenant."""

    def __init__(self, url: str, *, retention_s: float, timeout_s: float = 2.0) -> None:
        import redis as redis_lib

        self._shown = redact_url(url)
        self.retention_s = retention_s
        # from_url does not connect: the first command does (no network in constructors)
        self._client: redis.Redis = redis_lib.Redis.from_url(
            url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s
        )

    def remember(self, impression: Impression) -> None:
        """Kept ``retention_s`` from the impression's creation, as the SQLite store keeps it."""
        keep_ms = round((impression.created + self.retention_s - time.time()) * 1000)
        if keep_ms <= 0:
            return  # already past its retention: nothing to keep
        key = impression_key(impression.tenant, impression.user, impression.request_id)
        with self._errors():
            self._client.set(key, impression.to_json(), px=keep_ms)

    def impression(self, tenant: str, user: str, request_id: str) -> Impression | None:
        with self._errors():
            raw = self._client.get(impression_key(tenant, user, request_id))
        return Impression.from_json(raw) if raw is not None else None

    def append(self, events: Sequence[FeedbackEvent]) -> None:
        """One stream entry per call and tenant, holding all its labels: a single command is atomic,
        and survives a restart. Not MULTI/EXEC (nor a Lua script, which Redis 7 logs as one): Redis
        without the fix of redis/redis#14545 re-checks ACLs when it replays a transaction from the
        append-only file, as the ``default`` user, which is off here, so every transaction was dropped
        at restart (redis/redis#14541; found by the restart test on Debian's 7.0.15)."""
        by_tenant: dict[str, list[FeedbackEvent]] = {}
        for e in events:
            by_tenant.setdefault(e.tenant, []).append(e)
        with self._errors():
            pipe = self._client.pipeline(transaction=False)
            for tenant, batch in by_tenant.items():
                pipe.sadd(TENANTS, tenant)  # before the entry: a tenant listed without one is harmless
                pipe.xadd(stream_key(tenant), {"e": "[" + ",".join(e.to_json() for e in batch) + "]"})
            pipe.execute()

    def export(
        self, tenant: str | None = None, since: float | None = None, until: float | None = None
    ) -> Iterator[FeedbackEvent]:
        if tenant is not None:
            tenants = [tenant]
        else:
            with self._errors():
                members = cast("set[bytes]", self._client.smembers(TENANTS))
                tenants = sorted(t.decode() for t in members)
        for t in tenants:
            yield from self._tenant_events(t, since, until)

    def _tenant_events(
        self, tenant: str, since: float | None, until: float | None
    ) -> Iterator[FeedbackEvent]:
        start = f"{max(0, int(since * 1000) - SKEW_MS)}" if since is not None else "-"
        end = f"{int(until * 1000) + SKEW_MS}" if until is not None else "+"
        while True:
            with self._errors():
                page = cast(
                    "list[tuple[bytes, dict[bytes, bytes]]]",
                    self._client.xrange(stream_key(tenant), start, end, count=PAGE),
                )
            for entry_id, fields in page:
                for n, data in enumerate(json.loads(fields[b"e"])):
                    event = FeedbackEvent.from_dict(data, f"{entry_id.decode()}/{n}")
                    if (since is None or event.time >= since) and (until is None or event.time < until):
                        yield event
            if len(page) < PAGE:
                return
            start = "(" + page[-1][0].decode()  # exclusive: after the last entry read

    def check(self) -> None:
        with self._errors():
            self._client.ping()

    def close(self) -> None:
        self._client.close()

    def _errors(self) -> _RedisErrors:
        return _RedisErrors(self._shown)


class _RedisErrors:
    """Turns a Redis failure into 503 naming the (redacted) URL and the fix."""

    def __init__(self, shown: str) -> None:
        self.shown = shown

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        import redis as redis_lib

        if exc is not None and isinstance(exc, redis_lib.RedisError):
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"the feedback Redis at {self.shown} is not answering ({type(exc).__name__}: {exc}); start "
                "it, or check feedback.redis_url and that its user may use keys rampart:feedback:*",
                stage="feedback",
            ) from exc
