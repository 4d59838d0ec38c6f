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
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from services.common.types import ScoredChunk
from services.orchestrator.subqueries import clean_title

NAMED_DEPTH = 10  # distinct documents of the ranking whose titles are looked for in the question
# Not ``factcheck.text.words``: that lower-cases (case tells a title from a common word here) and keeps
# apostrophes whole, so "James's" and "James’s" would differ; here both are "James s".
_WORD = re.compile(r"\w+")


def _spelled(text: str) -> str:
    """Words only, case kept, single-spaced and padded: ``" Skin Yard "``."""
    return f" {' '.join(_WORD.findall(text))} "


def named_pair(
    question: str, hits: Sequence[ScoredChunk], depth: int = NAMED_DEPTH
) -> tuple[int, int] | None:
    """Indices (ranking order) of the best chunks of the two documents the question names by title, or
    ``None`` when it names fewer or more than two of the first ``depth`` documents (see module doc)."""
    asked = _spelled(question)
    seen: set[str] = set()
    named: dict[str, int] = {}  # title -> index of its best-ranked document
    for i, hit in enumerate(hits):
        doc = hit.chunk.doc_id
        if doc in seen:
            continue
        seen.add(doc)
        if len(seen) > depth:
            break
        title = _spelled(clean_title(hit.chunk.title))
        if len(title.strip()) > 2 and title in asked:
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
