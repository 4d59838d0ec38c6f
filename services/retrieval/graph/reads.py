"""What the graph stream reads from an index: a capability of its own (like the fact-check's
:class:`~services.retrieval.capabilities.CheckReads`), since not every backend stores mentions yet.

Both reads keep the ACL: :meth:`GraphReads.entity_postings` returns only passages the principal may
read (so an entity known only from passages it may not read is unknown to it, and its count never
tells it how many such passages exist), and :meth:`GraphReads.chunk_entities` is called only with
passages the first read returned. A walk therefore never crosses an edge the index would not show
the principal: an edge is a mention, and a mention belongs to its passage.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal, SearchFilters

MAX_KEYS = 4_096  # keys per postings read (a walk's frontier is capped far below this)


@runtime_checkable
class GraphReads(Protocol):
    """Entity postings and a passage's entities, for :mod:`services.retrieval.graph.walk`."""

    def entity_postings(
        self,
        keys: Sequence[str],
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
    ) -> dict[str, list[int]]:
        """Per key (``entity_key`` spelling) mentioned by a passage ``principal`` may read: those
        passages' chunk ids, ascending, at most ``limit`` (ask one more than a hub threshold to tell
        a hub). Keys with no readable mention are absent."""
        ...

    def chunk_entities(self, cids: Sequence[int]) -> dict[int, list[str]]:
        """Each chunk's entity keys as stored at ingest (callers pass only ids they may read)."""
        ...


def check_postings(keys: Sequence[str], limit: int) -> None:
    """Refuse a postings read every backend would refuse, before it costs a query (one rule for
    all, so a caller tested on one backend is not surprised by another)."""
    if len(keys) > MAX_KEYS:
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT,
            f"{len(keys)} entity keys in one read; send at most {MAX_KEYS}",
            keys=len(keys),
        )
    if limit < 1:
        raise RampartError(ErrorCode.INVALID_ARGUMENT, f"limit = {limit}; use 1 or more", limit=limit)


def graph_reads(index: object) -> GraphReads | None:
    """``index`` as the graph's reads, or ``None`` when it stores no graph (the stream then
    reports itself degraded instead of failing the search)."""
    return index if isinstance(index, GraphReads) else None
