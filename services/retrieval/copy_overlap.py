"""How much of its text a result shares with each of its close copies: an edit, or only the subject.

The planted-copies rule (docs/factcheck.md, rule 1) asks how a late group of near-copies was made. A
counterfactual attack edits a genuine passage (a date, a name swapped) and plants the edit: the edit
shares most of its words with its older original. Documents of one field that happen to say the same
thing (abstracts on one flow problem) lie as close in claim-vector space but share few words. Claim
cosines cannot tell these apart; the words can. The index reports which chunks are the close copies
(``Copies.others``); this reads their text once per search.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from services.common.types import Chunk
from services.common.words import words
from services.retrieval.capabilities import Copies


def word_overlap(a: str, b: str) -> float:
    """Jaccard overlap of the two texts' word sets (case folded): 1.0 for the same words, about 0.9 for
    a passage with one fact edited, 0.1–0.3 for two abstracts on one subject. Linear in the texts."""
    x, y = set(words(a)), set(words(b))
    return len(x & y) / len(x | y) if x or y else 0.0


def copy_overlaps(
    copies: Mapping[int, Copies],
    floor: float,
    own: Mapping[int, Chunk],
    chunks: Callable[[Sequence[int]], dict[int, Chunk]],
) -> dict[int, list[float]]:
    """Per chunk of ``copies`` (whose own chunk is in ``own``): the word overlap with each of its
    closest copies at claim cosine ``floor`` or above, parallel to the head of its ``cosines`` (0.0 when
    a copy's chunk cannot be read); one read of those chunks. ``floor`` 0: nothing asked, nothing read."""
    if floor <= 0.0:
        return {}
    wanted = sorted(
        {o for c in copies.values() for o, cos in zip(c.others, c.cosines, strict=True) if cos >= floor}
    )
    texts = {cid: chunk.text for cid, chunk in chunks(wanted).items()} if wanted else {}
    out: dict[int, list[float]] = {}
    for cid, c in copies.items():
        if cid not in own:
            continue
        mine = own[cid].text
        out[cid] = [
            word_overlap(mine, texts[o]) if o in texts else 0.0
            for o, cos in zip(c.others, c.cosines, strict=True)
            if cos >= floor
        ]
    return out
