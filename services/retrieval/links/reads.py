"""What linking reads from an index: the pages a text names by title.

A capability of its own (as the fact-check's :class:`~services.retrieval.capabilities.CheckReads`):
it needs a title table not every backend keeps, so an index declares it serves it
(:class:`~services.retrieval.embedded_index.EmbeddedIndex`, the OpenSearch index and
:class:`~services.retrieval.remote_index.RemoteIndex` do), and the link stream asks for it with
:func:`link_reads`, which names the missing capability and the fix instead of failing on a missing
method.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal, SearchFilters
from services.retrieval.index import Hits

MAX_NAMED_KEYS = 20_000  # candidate names looked up per ``named`` call


@runtime_checkable
class LinkReads(Protocol):
    """The pages a text names by title: the link stream of hybrid search (``LinkOptions.seeds``;
    docs/retrieval.md)."""

    def named(
        self,
        texts: Sequence[str],
        principal: Principal,
        limit: int,
        *,
        filters: SearchFilters | None = None,
    ) -> Hits:
        """The first chunk of each document ``principal`` may read whose name (its title without a
        trailing parenthetical, ``titles.name_key``) one of ``texts`` spells out, case-sensitive and on
        whole words; in order of first mention, at most ``limit``, score 1.0 each. A page that names
        another links to it."""
        ...


def link_reads(index: object) -> LinkReads:
    """``index`` as linking's reads, or FAILED_PRECONDITION naming what to change."""
    if isinstance(index, LinkReads):
        return index
    raise RampartError(
        ErrorCode.FAILED_PRECONDITION,
        f"the index {type(index).__name__} does not serve linking's reads (pages named by title); use an "
        "index that does (EmbeddedIndex, OpenSearchIndex, RemoteIndex) or search with link_seeds 0 (the "
        "generic corpus profile)",
        capability="LinkReads",
    )
