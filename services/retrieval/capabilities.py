"""Reads an index may serve beyond storage: the fact-check's (:class:`CheckReads`) and linking's
(:class:`LinkReads`).

:class:`~services.retrieval.index.SearchIndex` is what every index must do (write, search, read
chunks). These reads exist for one consumer each and need what not every backend keeps (claim vectors
beside the ordinary ones, a title table), so they are capabilities of their own: an index declares the
ones it serves (:class:`~services.retrieval.embedded_index.EmbeddedIndex` and
:class:`~services.retrieval.remote_index.RemoteIndex` serve both), and a caller asks for the one it
uses with :func:`check_reads` / :func:`link_reads`, which name the missing capability and the fix
instead of failing on a missing method.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal, SearchFilters
from services.retrieval.index import Hits

MAX_COPY_LIMIT = 64  # copy_cosines: cosines per chunk (one per other document)


@dataclass(frozen=True)
class Copies:
    """One chunk's near-copy profile (:meth:`CheckReads.copy_cosines`).

    ``cosines``: claim-vector cosine to the closest chunk of each other readable document, highest
    first. ``neighbors``: for the first ``len(neighbors)`` of those (the ones at or above the caller's
    ``expand`` cosine), that closest chunk's *own* cosines, computed the same way — what lets the
    planted-copies detector grow a dense group to its border members (DBSCAN over the corpus).
    ``leads``: for the first ``len(leads)`` of the cosines (those at or above the caller's ``leads``
    cosine), the name that closest chunk opens with (``services.common.subjects.lead_name``, ``""`` if
    none) — what tells a template family's pages from copies of one claim.
    """

    cosines: list[float]
    neighbors: list[list[float]] = field(default_factory=list)
    leads: list[str] = field(default_factory=list)


@runtime_checkable
class CheckReads(Protocol):
    """What the fact-check reads from the index, through the search that feeds it
    (``SearchParams.vectors`` and ``copy_depth``): the embeddings stored at ingest, so the check
    clusters without embedding again, and each result's near-copies elsewhere in the corpus, the
    planted-copies signal (docs/factcheck.md, rule 1)."""

    def stored_vectors(self, cids: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        """Stored embeddings of chunks (what dense search compares): later stages reuse them."""
        ...

    def copy_cosines(
        self,
        cids: Sequence[int],
        principal: Principal,
        limit: int,
        *,
        expand: float = 0.0,
        leads: float = 0.0,
    ) -> dict[int, Copies]:
        """For each chunk with a claim vector: the cosines between it and the claim vector of the
        closest chunk of each *other* document ``principal`` may read, highest first, at most
        ``limit``; with ``expand`` > 0, also the same cosines of each of those closest chunks that
        lie at ``expand`` or above (``Copies.neighbors``); with ``leads`` > 0, the opening name of
        each closest chunk at ``leads`` or above (``Copies.leads``). Chunks without a claim vector
        are absent. Callers pass only ids they may read."""
        ...


@runtime_checkable
class LinkReads(Protocol):
    """What linking reads from the index: the pages a text names by title, the link stream of hybrid
    search (``SearchParams.link_seeds``; docs/retrieval.md)."""

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


def check_reads(index: object) -> CheckReads:
    """``index`` as the fact-check's reads, or FAILED_PRECONDITION naming what to change."""
    if isinstance(index, CheckReads):
        return index
    raise RampartError(
        ErrorCode.FAILED_PRECONDITION,
        f"the index {type(index).__name__} does not serve the fact-check's reads (stored vectors, copy "
        "cosines); use an index that does (EmbeddedIndex, RemoteIndex) or search with the fact-check off",
        capability="CheckReads",
    )


def link_reads(index: object) -> LinkReads:
    """``index`` as linking's reads, or FAILED_PRECONDITION naming what to change."""
    if isinstance(index, LinkReads):
        return index
    raise RampartError(
        ErrorCode.FAILED_PRECONDITION,
        f"the index {type(index).__name__} does not serve linking's reads (pages named by title); use an "
        "index that does (EmbeddedIndex, RemoteIndex) or search with link_seeds 0",
        capability="LinkReads",
    )
