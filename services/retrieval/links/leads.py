"""The opening names of a result's near-copies: what tells a template family from copies of a claim.

A wiki's season pages, a product line's spec sheets open with their own subject's name and share
everything else; a planted campaign repeats one claim about one subject. The fact-check's
``copy_subjects`` rule (linked profile only) reads, for each close copy of a judged result, the name
that copy opens with. The index reports which chunks are the close copies (``Copies.others``, a core
read); this module reads their text and takes the name, so no index needs to know about names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from services.common.subjects import lead_name
from services.common.types import Chunk
from services.retrieval.capabilities import Copies


def copy_leads(
    copies: Mapping[int, Copies], floor: float, chunks: Callable[[Sequence[int]], dict[int, Chunk]]
) -> dict[int, list[str]]:
    """Per chunk of ``copies``: the name each of its closest copies at ``floor`` or above opens with
    (``""`` when none, or when the copy's chunk cannot be read), parallel to the head of its
    ``cosines``; one read of those chunks. ``floor`` 0: nothing asked, nothing read."""
    if floor <= 0.0:
        return {}
    wanted = sorted(
        {
            other
            for c in copies.values()
            for other, cos in zip(c.others, c.cosines, strict=True)
            if cos >= floor
        }
    )
    opening = {cid: lead_name(chunk.text) for cid, chunk in chunks(wanted).items()} if wanted else {}
    return {
        cid: [opening.get(other, "") for other, cos in zip(c.others, c.cosines, strict=True) if cos >= floor]
        for cid, c in copies.items()
    }
