"""Documents a question names by title: "Were Skin Yard and Ostava both from the U.S.?" asks about the
documents titled *Skin Yard* and *Ostava*, whatever the cross-encoder thinks of each on its own.

A comparison or a two-entity question is answered by the two pages it names. The ranking may hold one of
them third or fifth, behind a page *about* the first one ("Skin Yard (album)"), because a passage that
answers half of the question is not relevant to all of it. When exactly two documents in the head of the
ranking have titles the question spells out, they go first. Matching is on whole words and case-sensitive
("Casino, New South Wales" is not named by "hotel and casino"), on the title without its trailing
parenthetical ("Awake (film)" is named by "Awake"; of two documents with one title, the better-ranked
counts). Three or more named titles, or one title inside the other ("Skin Yard" / "Skin Yard Live"),
are ambiguous and change nothing.

The same matching finds the bridge of a two-hop question, the page the answer needs second: it is
usually named by the first ("the label of the band that released *Bleach*": the *Bleach* page names
*Sub Pop*), or names it. Two pages that neither name the other rarely answer a two-hop question
together, so when the top two are unlinked, :func:`linked_second` brings the best page linked to the
top one up to second. :func:`linked_next` then moves the documents the top two name, from anywhere in
the head, to just behind them, so the bridge page reaches the top five when the top two are not it.
"""

from __future__ import annotations

from collections.abc import Sequence

from services.common.titles import clean_title, names, spelled
from services.common.types import ScoredChunk

LINK_DEPTH = 30  # distinct documents searched for pages the top two name
# pages naming the top two that move behind them: a hub page is named by many, the best two suffice
BACKLINKS_NEXT = 2
NAMED_DEPTH = 10  # distinct documents of the ranking whose titles are looked for in the question


def named_pair(
    question: str, hits: Sequence[ScoredChunk], depth: int = NAMED_DEPTH
) -> tuple[int, int] | None:
    """Indices (ranking order) of the best chunks of the two documents the question names by title, or
    ``None`` when it names fewer or more than two of the first ``depth`` documents (see module doc)."""
    asked = spelled(question)
    seen: set[str] = set()
    named: dict[str, int] = {}  # title -> index of its best-ranked document
    for i, hit in enumerate(hits):
        doc = hit.chunk.doc_id
        if doc in seen:
            continue
        seen.add(doc)
        if len(seen) > depth:
            break
        title = spelled(clean_title(hit.chunk.title))
        if names(asked, hit.chunk.title):
            named.setdefault(title, i)  # "Skin Yard (album)" below "Skin Yard": the ranking chose
    if len(named) != 2:
        return None
    (a, i), (b, j) = named.items()
    if a in b or b in a:  # one title inside the other: which page is meant is not clear
        return None
    return i, j


def named_first(question: str, hits: Sequence[ScoredChunk], depth: int = NAMED_DEPTH) -> list[ScoredChunk]:
    """``hits`` with the two documents the question names by title moved to the front (their order
    kept), or unchanged (see :func:`named_pair`)."""
    pair = named_pair(question, hits, depth)
    if pair is None:
        return list(hits)
    return [hits[pair[0]], hits[pair[1]], *(h for k, h in enumerate(hits) if k not in pair)]


def _best_chunks(hits: Sequence[ScoredChunk]) -> dict[str, int]:
    """Document -> index of its best chunk, in ranking order."""
    firsts: dict[str, int] = {}
    for i, hit in enumerate(hits):
        firsts.setdefault(hit.chunk.doc_id, i)
    return firsts


def linked_second(question: str, hits: Sequence[ScoredChunk], depth: int = NAMED_DEPTH) -> list[ScoredChunk]:
    """``hits`` with the first document linked by title to the top one (either names the other) moved to
    second place, when the top two are not linked to each other and the question does not name two
    documents; otherwise unchanged. Two unlinked pages rarely answer a two-hop question together."""
    firsts = _best_chunks(hits)
    best = [hits[i] for i in firsts.values()][:depth]
    if len(best) < 3 or named_pair(question, hits, depth) is not None:
        return list(hits)
    asked = spelled(question)
    said = [spelled(h.chunk.text) for h in best]

    def linked(a: int, b: int) -> bool:
        """Either of ``best[a]``, ``best[b]`` names the other, by a title the question does not name:
        a page the question names is mentioned by every page retrieved for that name."""
        ta, tb = best[a].chunk.title, best[b].chunk.title
        return (names(said[a], tb) and not names(asked, tb)) or (names(said[b], ta) and not names(asked, ta))

    if linked(0, 1):
        return list(hits)
    k = next((k for k in range(2, len(best)) if linked(0, k)), None)
    if k is None:
        return list(hits)
    top, link = best[0], best[k]
    doc = link.chunk.doc_id
    cut = firsts[top.chunk.doc_id] + 1
    rest = [h for h in hits[cut:] if h.chunk.doc_id != doc]
    return [*hits[:cut], *(h for h in hits if h.chunk.doc_id == doc), *rest]


def linked_next(
    question: str, hits: Sequence[ScoredChunk], depth: int = LINK_DEPTH, backlinks: int = BACKLINKS_NEXT
) -> list[ScoredChunk]:
    """``hits`` with the documents that the top two documents' best chunks name by title, and the first
    ``backlinks`` documents whose best chunk names one of the top two, (among the first ``depth``
    documents; titles the question names do not count, :func:`named_first` placed those) moved, with
    all their chunks and in their order, to just behind the top two's best chunks."""
    firsts = _best_chunks(hits)
    if len(firsts) < 3:
        return list(hits)
    docs = list(firsts)
    leads = docs[:2]
    said = " ".join(spelled(hits[firsts[d]].chunk.text) for d in leads)
    asked = spelled(question)
    lead_titles = [t for t in (hits[firsts[d]].chunk.title for d in leads) if not names(asked, t)]
    moved: set[str] = set()
    naming = 0
    for doc in docs[2:depth]:
        chunk = hits[firsts[doc]].chunk
        if names(said, chunk.title) and not names(asked, chunk.title):
            moved.add(doc)
        elif naming < backlinks and lead_titles:
            text = spelled(chunk.text)
            if any(names(text, t) for t in lead_titles):
                moved.add(doc)
                naming += 1
    if not moved:
        return list(hits)
    cut = firsts[leads[1]] + 1
    tail = [h for h in hits[cut:] if h.chunk.doc_id not in moved]  # hits[:cut] is the top two's only
    return [*hits[:cut], *(h for h in hits if h.chunk.doc_id in moved), *tail]
