"""Two-hop lift: a page linked by title to one of the two best reranked pages rises toward that page's
score.

A cross-encoder reads one (query, page) pair at a time, so the second page of a two-hop question looks
unrelated to the question: for "the label of the band that released *Bleach*", the *Sub Pop* page says
nothing about *Bleach*, yet the *Bleach* page names it. The page the answer needs second is almost
always linked to the first by title, one naming the other (``services.common.titles``), so after
reranking, a candidate linked to one of the top ``seeds`` documents is lifted to ``weight`` of the way
from the head's lowest score to that document's score, unless it already scores more. It never passes
the page it hangs from, and an unlinked page keeps its score.

A title the query itself spells out does not link: every page retrieved for that name mentions it.
Nor does a name that is a common word (``titles.common_name``: a number, a month, a one-word title the
head's texts also use in lower case, like "Hotel (1967 film)"), which would link a page to any text
that opens a sentence with it or gives a date.
``weight`` 0.8 was chosen on the HotpotQA-500 train half (docs/reranking.md, "Two-hop lift"); 0 turns
it off. A planted page that names a top page rises too, but never above it, and the fact-check reads
the lifted list after (held-out attack figures unchanged, docs/journal/2026-11-24-poisonedrag-status.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from services.common.titles import common_name, names, spelled
from services.common.types import ScoredChunk

LIFT_SEEDS = 2  # documents, best first, whose linked pages are lifted: a two-hop answer needs two


def lift_linked(
    query: str, head: Sequence[ScoredChunk], scores: Sequence[float], weight: float, seeds: int = LIFT_SEEDS
) -> tuple[list[float], int]:
    """``scores`` (one per ``head`` chunk, higher is better) with linked chunks lifted (see module doc),
    and how many were lifted."""
    out = list(scores)
    if weight <= 0.0 or len(head) < 2:
        return out, 0
    order = sorted(range(len(head)), key=lambda i: (-scores[i], i))
    tops: list[int] = []
    for i in order:
        if len(tops) == seeds:
            break
        if all(head[i].chunk.doc_id != head[j].chunk.doc_id for j in tops):
            tops.append(i)
    asked = spelled(query)
    said = [spelled(h.chunk.text) for h in head]
    everything = " ".join(said)
    can_link = [not names(asked, h.chunk.title) and not common_name(h.chunk.title, everything) for h in head]
    floor = min(scores)

    def linked(a: int, b: int) -> bool:
        """``head[a]`` names ``head[b]``'s title or the other way round, by a title that can link."""
        return (can_link[b] and names(said[a], head[b].chunk.title)) or (
            can_link[a] and names(said[b], head[a].chunk.title)
        )

    lifted = 0
    seed_docs = {head[j].chunk.doc_id for j in tops}
    for i, hit in enumerate(head):
        if hit.chunk.doc_id in seed_docs:
            continue
        best = max((scores[j] for j in tops if linked(j, i)), default=None)
        if best is None:
            continue
        target = floor + weight * (best - floor)
        if target > out[i]:
            out[i] = target
            lifted += 1
    return out, lifted
