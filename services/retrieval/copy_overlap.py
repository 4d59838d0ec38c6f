"""How much of its text a result shares with each of its close copies: an edit, or only the subject.

The planted-copies rule (docs/factcheck.md, rule 1) asks how a late group of near-copies was made. A
counterfactual attack edits a genuine passage (a date, a name swapped) and plants the edit: the edit
shares most of its words with its older original. Documents of one field that happen to say the same
thing (abstracts on one flow problem) lie as close in claim-vector space but share few words. Claim
cosines cannot tell these apart; the words can. The index reports which chunks are the close copies
(``Copies.others``); this reads their text once per search.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from services.common.types import Chunk, CopyEdit
from services.common.words import words
from services.retrieval.capabilities import Copies


def word_overlap(a: str, b: str) -> float:
    """Jaccard overlap of the two texts' word sets (case folded): 1.0 for the same words, about 0.9 for
    a passage with one fact edited, 0.1–0.3 for two abstracts on one subject. Linear in the texts."""
    x, y = set(words(a)), set(words(b))
    return len(x & y) / len(x | y) if x or y else 0.0


EDIT_OVERLAP = 0.5  # an edit shares most of its words with what it edits: more than half of them
MAX_EDIT_WORDS = 2_000  # difflib is quadratic in the worst case: a chunk longer than this is not diffed


def replaced_spans(older: str, newer: str) -> list[tuple[str, str]]:
    """The spans of ``older`` that ``newer`` replaced, word for word (case folded), in text order:
    ``[("tampa florida", "glendale arizona")]`` for a passage with one claim swapped. Insertions and
    deletions are not replacements (an annotated copy, an excerpt). Bounded: texts over
    :data:`MAX_EDIT_WORDS` words are not compared, and difflib's own defence stays on (``autojunk``: in
    a text of 200 words or more, a word making up over 1% of it cannot start a match; "the" repeated
    would otherwise make the diff quadratic, about a second for two 2,000-word texts of one word)."""
    a, b = words(older), words(newer)
    if len(a) > MAX_EDIT_WORDS or len(b) > MAX_EDIT_WORDS:
        return []
    ops = difflib.SequenceMatcher(a=a, b=b, autojunk=True).get_opcodes()
    return [(" ".join(a[i1:i2]), " ".join(b[j1:j2])) for tag, i1, i2, j1, j2 in ops if tag == "replace"]


def copy_edit(own: Chunk, older: Chunk) -> CopyEdit | None:
    """What ``own`` replaced of ``older``, when it shares most of its words (:data:`EDIT_OVERLAP`) and
    replaced something; ``heading`` when a replaced word names either chunk's subject (its title or
    section path; not the header's "Key terms", which the chunker picks out of the text itself), and
    the words only one of them uses (few, for an edit)."""
    if word_overlap(own.text, older.text) <= EDIT_OVERLAP:
        return None
    replaced = replaced_spans(older.text, own.text)
    if not replaced:
        return None
    heads = set(words(" ".join([own.title, *own.section_path, older.title, *older.section_path])))
    touched = {w for pair in replaced for side in pair for w in side.split()}
    one_sided = sorted(set(words(own.text)) ^ set(words(older.text)))
    return CopyEdit(
        doc_id=older.doc_id, replaced=replaced, heading=bool(touched & heads), one_sided=one_sided
    )


@dataclass(frozen=True)
class CopyTexts:
    """What the search reports of each result's close copies' text: word overlaps (parallel to the head
    of its cosines) and, for the older copies sharing most of its words, what it replaced."""

    overlaps: dict[int, list[float]]
    edits: dict[int, list[CopyEdit]]


def copy_texts(
    copies: Mapping[int, Copies],
    floor: float,
    own: Mapping[int, Chunk],
    chunks: Callable[[Sequence[int]], dict[int, Chunk]],
) -> CopyTexts:
    """Per chunk of ``copies`` (whose own chunk is in ``own``): the word overlap with each of its
    closest copies at claim cosine ``floor`` or above, parallel to the head of its ``cosines`` (0.0 when
    a copy's chunk cannot be read), and its edits of the older ones (chunk ids are write order); one
    read of those chunks. ``floor`` 0: nothing asked, nothing read."""
    if floor <= 0.0:
        return CopyTexts({}, {})
    wanted = sorted(
        {o for c in copies.values() for o, cos in zip(c.others, c.cosines, strict=True) if cos >= floor}
    )
    read = chunks(wanted) if wanted else {}
    overlaps: dict[int, list[float]] = {}
    edits: dict[int, list[CopyEdit]] = {}
    for cid, c in copies.items():
        if cid not in own:
            continue
        mine = own[cid]
        close = [o for o, cos in zip(c.others, c.cosines, strict=True) if cos >= floor]
        overlaps[cid] = [word_overlap(mine.text, read[o].text) if o in read else 0.0 for o in close]
        found = [e for o in close if o < cid and o in read and (e := copy_edit(mine, read[o])) is not None]
        if found:
            edits[cid] = found
    return CopyTexts(overlaps, edits)
