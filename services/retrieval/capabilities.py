"""Reads an index may serve beyond storage: the fact-check's (:class:`CheckReads`); linking's are the
linked profile's extension (:class:`services.retrieval.links.reads.LinkReads`).

:class:`~services.retrieval.index.SearchIndex` is what every index must do (write, search, read
chunks). These reads exist for one consumer each and need what not every backend keeps (claim vectors
beside the ordinary ones, a title table), so they are capabilities of their own: an index declares the
ones it serves (:class:`~services.retrieval.embedded_index.EmbeddedIndex` and
:class:`~services.retrieval.remote_index.RemoteIndex` serve both), and a caller asks for the one it
uses with :func:`check_reads` (:func:`~services.retrieval.links.reads.link_reads`), which name the missing capability and the fix
instead of failing on a missing method.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from services.common.errors import ErrorCode, RampartError, invalid
from services.common.types import Principal

MAX_COPY_LIMIT = 64  # copy_cosines: cosines per chunk (one per other document)
# copy_cosines searches limit * FACTOR + EXTRA claim vectors per chunk (other chunks of its own
# document and several chunks of one other document are dropped from what it finds)
COPY_SEARCH_FACTOR = 4
COPY_SEARCH_EXTRA = 8

# (chunk ids, limit) -> per chunk with a claim vector: (chunk, cosine) of the closest chunk of each
# other readable document, highest first, at most ``limit``
Closest = Callable[[list[int], int], dict[int, list[tuple[int, float]]]]


@dataclass(frozen=True)
class Copies:
    """One chunk's near-copy profile (:meth:`CheckReads.copy_cosines`).

    ``cosines``: claim-vector cosine to the closest chunk of each other readable document, highest
    first. ``neighbors``: for the first ``len(neighbors)`` of those (the ones at or above the caller's
    ``expand`` cosine), that closest chunk's *own* cosines, computed the same way — what lets the
    planted-copies detector grow a dense group to its border members (DBSCAN over the corpus).
    ``others``: parallel to ``cosines``, each closest chunk's id, for a caller that reads more about a
    copy (the linked profile reads the name it opens with, :mod:`services.retrieval.links.leads`).
    ``arrivals``: parallel to
    ``cosines``, each closest chunk's place in the index's write order (its chunk id, allocated in write
    order: larger = written later; empty when an index does not report it) — what tells a group that
    arrived after the documents around it (a campaign planted into a corpus) from one that came with
    them (docs/factcheck.md, "arrival order").
    """

    cosines: list[float]
    neighbors: list[list[float]] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)
    others: list[int] = field(default_factory=list)


def copy_profiles(
    cids: Sequence[int],
    limit: int,
    *,
    expand: float,
    closest: Closest,
) -> dict[int, Copies]:
    """:meth:`CheckReads.copy_cosines` from an index's ``closest`` search: one implementation of the
    arguments' checks and of how neighbors are assembled, so every index answers alike. Chunk ids are
    allocated in write order by every index here, so a close chunk's id is also its arrival."""
    if not 1 <= limit <= MAX_COPY_LIMIT:
        raise invalid(f"limit = {limit} is out of range; use 1..{MAX_COPY_LIMIT}", field="limit", value=limit)
    if not 0.0 <= expand <= 1.0:
        raise invalid(f"expand = {expand} is out of range; use 0..1 (0 = none)", field="expand", value=expand)
    near_of = closest(list(cids), limit)
    wanted = _reaching(near_of, expand)
    theirs = closest(wanted, limit) if wanted else {}
    out: dict[int, Copies] = {}
    for cid, near in near_of.items():
        neighbors = (
            [[c for _, c in theirs.get(other, [])] for other, cos in near if cos >= expand]
            if expand > 0.0
            else []
        )
        ids = [other for other, _ in near]
        out[cid] = Copies([cos for _, cos in near], neighbors, arrivals=ids, others=ids)
    return out


def closest_per_document(
    order: Sequence[int], found: Sequence[Sequence[tuple[int, float]]], doc_of: dict[int, str], limit: int
) -> dict[int, list[tuple[int, float]]]:
    """Per chunk of ``order``: from its search hits ``found`` (closest first), the closest chunk of
    each *other* document, highest cosine first, at most ``limit``."""
    out: dict[int, list[tuple[int, float]]] = {}
    for cid, hits in zip(order, found, strict=True):
        best: dict[str, tuple[int, float]] = {}
        for other, cos in hits:
            doc = doc_of.get(other)
            if doc is None or doc == doc_of.get(cid):
                continue
            if doc not in best or cos > best[doc][1]:
                best[doc] = (other, cos)
        out[cid] = sorted(best.values(), key=lambda oc: -oc[1])[:limit]
    return out


def _reaching(closest: dict[int, list[tuple[int, float]]], floor: float) -> list[int]:
    """The close chunks at ``floor`` or above, once each (none when ``floor`` is 0: not asked for)."""
    if floor <= 0.0:
        return []
    return sorted({other for near in closest.values() for other, cos in near if cos >= floor})


@runtime_checkable
class CheckReads(Protocol):
    """What the fact-check reads from the index, through the search that feeds it
    (``SearchParams.vectors`` and ``copy_depth``): the embeddings stored at ingest, so the check
    clusters without embedding again, and each result's near-copies elsewhere in the corpus, the
    planted-copies signal (docs/factcheck.md, rule 1)."""

    def stored_vectors(
        self, cids: Sequence[int], principal: Principal | None = None
    ) -> dict[int, npt.NDArray[np.float32]]:
        """Stored embeddings of chunks (what dense search compares): later stages reuse them;
        ``principal`` as for :meth:`SearchIndex.cosine`."""
        ...

    def copy_cosines(
        self,
        cids: Sequence[int],
        principal: Principal,
        limit: int,
        *,
        expand: float = 0.0,
    ) -> dict[int, Copies]:
        """For each chunk with a claim vector: the cosines between it and the claim vector of the
        closest chunk of each *other* document ``principal`` may read, highest first, at most
        ``limit``; with ``expand`` > 0, also the same cosines of each of those closest chunks that
        lie at ``expand`` or above (``Copies.neighbors``); each closest chunk's id (``Copies.others``).
        Chunks without a claim vector are absent. Callers pass only ids they may read."""
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
