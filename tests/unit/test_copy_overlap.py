"""The word overlap the planted-copies rule reads: an edit shares most words, a sibling fewer."""

from __future__ import annotations

import pytest

from services.common.types import Chunk
from services.retrieval.capabilities import Copies
from services.retrieval.copy_overlap import (
    MAX_EDIT_WORDS,
    copy_edit,
    copy_texts,
    replaced_spans,
    word_overlap,
)

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
    got = copy_texts(copies, 0.8, {1: store[1]}, chunks).overlaps
    assert reads == [[2, 99]]  # one read of the copies at the floor or above; 3 is below it
    assert got[1][0] == pytest.approx(word_overlap(TEXT, store[2].text)) and got[1][1] == 0.0  # 99 unreadable
    nothing = copy_texts(copies, 0.0, {1: store[1]}, chunks)
    assert nothing.overlaps == {} and nothing.edits == {} and len(reads) == 1


def test_replaced_spans_are_replacements_only() -> None:
    edited = TEXT.replace("Folsom Field", "Mile High Stadium")
    assert replaced_spans(TEXT, edited) == [("folsom field", "mile high stadium")]
    assert replaced_spans(TEXT, TEXT + " It went 3-9.") == []  # an insertion: an annotated copy
    assert replaced_spans(TEXT, TEXT.split(" at ")[0]) == []  # a deletion: an excerpt
    long = " ".join(["word"] * (MAX_EDIT_WORDS + 1))
    assert replaced_spans(long, long + " more") == []  # bounded: not compared
    # a long passage: the swapped claim is found though its common words are junk to difflib
    passage = " ".join(f"the {i} of the text" for i in range(60))
    assert replaced_spans(passage, passage.replace("the 7 of", "the seven of")) == [("7", "seven")]


def test_copy_texts_report_edits_of_older_copies_only() -> None:
    swapped = TEXT.replace("Folsom Field", "Mile High Stadium")
    store = {1: chunk(1, TEXT), 2: chunk(2, swapped), 3: chunk(3, TEXT.replace("2009", "2011"))}

    def chunks(cids: object) -> dict[int, Chunk]:
        return {c: store[c] for c in cids if c in store}  # type: ignore[attr-defined]

    copies = {2: Copies([0.97, 0.9], others=[1, 3]), 1: Copies([0.97, 0.9], others=[2, 3])}
    edits = copy_texts(copies, 0.8, {1: store[1], 2: store[2]}, chunks).edits
    # chunk 2 edits the older chunk 1; chunk 3 arrived later, so it is nobody's original here
    assert [e.doc_id for e in edits[2]] == ["d1"] and edits[2][0].replaced == [
        ("folsom field", "mile high stadium")
    ]
    assert 1 not in edits  # the original edits nothing older


def test_a_replaced_heading_word_marks_another_subject() -> None:
    older = chunk(1, TEXT).model_copy(update={"title": "2009 Colorado Buffaloes football team"})
    newer = chunk(2, TEXT.replace("2009", "2011")).model_copy(
        update={"title": "2011 Colorado Buffaloes football team"}
    )
    edit = copy_edit(newer, older)
    assert edit is not None and edit.heading and edit.replaced == [("2009", "2011")]
    assert copy_edit(chunk(3, "Aspirin lowers the risk of a second heart attack."), older) is None
