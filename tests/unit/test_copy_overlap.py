"""The word overlap the planted-copies rule reads: an edit shares most words, a sibling fewer."""

from __future__ import annotations

import pytest

from services.common.types import Chunk
from services.retrieval.capabilities import Copies
from services.retrieval.copy_overlap import copy_overlaps, word_overlap

TEXT = "The 2009 Colorado Buffaloes football team represented the University of Colorado at Folsom Field."


def chunk(cid: int, text: str) -> Chunk:
    return Chunk(chunk_id=f"d{cid}#0", doc_id=f"d{cid}", tenant="acme", ordinal=0, text=text)


def test_word_overlap_is_the_jaccard_of_word_sets() -> None:
    assert word_overlap(TEXT, TEXT.upper()) == 1.0  # case folded
    edited = TEXT.replace("Folsom Field", "Mile High Stadium")
    assert 0.5 < word_overlap(TEXT, edited) < 1.0  # more than half its words: an edit
    assert word_overlap(TEXT, "Aspirin lowers the risk of a second heart attack.") < 0.2
    assert word_overlap("", "") == 0.0


def test_copy_overlaps_read_only_what_is_asked_once() -> None:
    reads: list[list[int]] = []
    store = {1: chunk(1, TEXT), 2: chunk(2, TEXT.replace("2009", "2011")), 3: chunk(3, "unrelated words")}

    def chunks(cids: object) -> dict[int, Chunk]:
        reads.append(list(cids))  # type: ignore[call-overload]
        return {c: store[c] for c in cids if c in store}  # type: ignore[attr-defined]

    copies = {1: Copies([0.95, 0.85, 0.3], others=[2, 99, 3])}
    got = copy_overlaps(copies, 0.8, {1: store[1]}, chunks)
    assert reads == [[2, 99]]  # one read of the copies at the floor or above; 3 is below it
    assert got[1][0] == pytest.approx(word_overlap(TEXT, store[2].text)) and got[1][1] == 0.0  # 99 unreadable
    assert copy_overlaps(copies, 0.0, {1: store[1]}, chunks) == {} and len(reads) == 1
