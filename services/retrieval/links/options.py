"""What a linked tenant's search asks for beyond hybrid retrieval: one value the profile owns.

A tenant of the generic profile searches with :data:`NO_LINKS` (``SearchPipeline.profiled`` makes
sure), so the core search parameters carry one optional value instead of a field per title feature.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common.errors import invalid
from services.retrieval.config import MAX_BACKLINKS, MAX_LINK_SEEDS

MAX_LINK_HEAD = 1000  # as MAX_TOP_K: the head is at most the results asked for


@dataclass(frozen=True)
class LinkOptions:
    """The link stream's and the copy leads' knobs; all zero = none of it runs."""

    # > 0: the documents the top ``seeds`` fused results name by title join the head at its end (at
    # most ``stream.LINK_SHARE`` of it): a two-hop question's second page is named by its first
    seeds: int = 0
    # the head those pages join: what the reranker reads (0 = all ``top_k``); the search pipeline sets it
    head: int = 0
    # with ``seeds``: at most this many documents that name a seed by title (the best for the query by
    # BM25) join the head too: the second page of a two-hop question may name the first
    backlinks: int = 0
    # > 0: the closest copies (claim-vector cosine at this value or above) of the copy-checked results
    # carry the name their chunk opens with: the planted-copies rule does not count a copy about
    # another subject (a template family's pages), ``factcheck.copy_subjects``
    copy_leads: float = 0.0

    def __post_init__(self) -> None:
        for name, value, high in (
            ("link_seeds", self.seeds, MAX_LINK_SEEDS),
            ("link_head", self.head, MAX_LINK_HEAD),
            ("backlinks", self.backlinks, MAX_BACKLINKS),
        ):
            if not 0 <= value <= high:
                raise invalid(
                    f"{name} = {value} must be within 0..{high} (0 = none)", field=name, value=value
                )
        if not 0.0 <= self.copy_leads <= 1.0:
            raise invalid(
                f"copy_leads = {self.copy_leads} must be within 0..1 (0 = none)",
                field="copy_leads",
                value=self.copy_leads,
            )

    @property
    def any(self) -> bool:
        """Whether anything of the extension runs for this search."""
        return self.seeds > 0 or self.copy_leads > 0.0


NO_LINKS = LinkOptions()
"""A generic tenant's options: no link stream, no back-links, no copy leads."""
