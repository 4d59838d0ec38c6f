"""Planted-copies detector: the passage's claim is repeated, reworded, by several other documents.

PoisonedRAG-style attacks write several paraphrases of one false claim, each as its own document.
:mod:`near_duplicates` sees them only when they rank together for the query; this detector reads what
the index already knows about the whole corpus: the cosines between this chunk's *claim vector* (its
text embedded without the context header, which makes every chunk about one subject look alike) and
the closest chunk of each other document the caller may read (``ScoredChunk.copy_cosines``, computed
by the index). A passage with ``min_copies`` or more other documents at cosine ``>= threshold`` says
what several sources say nearly word for word — independent writing rarely does that; planted text
does. Genuine copies (mirrored pages, templates) look the same: such corpora raise ``min_copies`` or
set it to 0 (docs/factcheck.md).

Paraphrases written loosely (PoisonedRAG's NQ texts: sibling cosines down to 0.65) leave some
siblings short of ``min_copies`` close copies, although each is close to a sibling that has them.
So the group is grown as DBSCAN grows a cluster: a passage within ``border`` of a *core* passage
(one with ``min_copies`` close copies, read from ``ScoredChunk.copy_neighbors``) is a member too.
A genuine paragraph on the planted subject lies that close as well, but farther from the core than
the core's own copies lie (measured on dev: a median 0.16 below the core's ``min_copies``-th copy,
planted siblings 0.03), so with ``slack`` < 1 a border member must also lie within ``slack`` of
that copy: it must look like one of the group, not only near it.

Template families (season pages, species of one genus, battles of one campaign) are near-copies of
one another too, each about its own subject, which it names first. So with ``leads`` (the opening
name of each close copy, :func:`~services.common.subjects.lead_name`, from the index) a copy whose
opening name holds a word neither the passage nor the query uses does not count when the passage
opens with a name too (:func:`~services.common.subjects.other_subject`): planted paraphrases open
with the question's own entities.

A pasted copy is not a paraphrase. A policy pasted into three handbooks gives each handbook's chunk
the *same* text, hence the same claim vector (cosine :data:`SAME_TEXT` or above: equal up to float
rounding); several paraphrases written around one question never do. So the same text elsewhere is
not counted, and two other documents holding one text (their cosines to this chunk are then equal)
count once: copies are one voice, however many documents carry them (issue 34, "a legitimate copy is
not a campaign"). An attacker gains nothing from pasting one text many times that the count would
have caught: the copies add no new wording to rank with.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from services.common.subjects import other_subject
from services.factcheck.detectors import Signal

SAME_TEXT = 0.999  # claim cosine of two chunks holding the same text (float rounding only)


def planted_copies(
    cosines: Sequence[float] | None,
    *,
    threshold: float,
    min_copies: int,
    neighbors: Sequence[Sequence[float]] | None = None,
    border: float = 0.0,
    slack: float = 1.0,
    leads: Sequence[str] | None = None,
    words: frozenset[str] | None = None,
    island: float = 0.0,
) -> Signal:
    """Core: score = the ``min_copies``-th highest cosine when at least ``min_copies`` reach
    ``threshold``. Border (``border`` > 0): score = the cosine to the closest core neighbour at
    ``border`` or above and no more than ``slack`` below that neighbour's ``min_copies``-th copy
    (``neighbors`` is parallel to the head of ``cosines``). ``leads`` (parallel to the head of
    ``cosines`` too) with ``words`` (``subject_context``; ``None`` = no such test): copies about
    another subject are left out of both counts. ``island`` > 0: the core group counts only when the
    closest document below ``threshold`` lies at least ``island`` below its farthest member."""
    if not cosines or min_copies < 1:
        return Signal.none()
    others = (
        {i: name for i, lead in enumerate(leads or ()) if (name := other_subject(lead, words)) is not None}
        if words is not None
        else {}
    )
    close = sorted(
        paraphrases(c for i, c in enumerate(cosines) if c >= threshold and i not in others), reverse=True
    )
    if len(close) >= min_copies and island > 0.0:
        rest = max((c for c in cosines if c < threshold), default=0.0)  # none in sight: the group is apart
        if close[-1] - rest < island:  # a continuum of similar documents, not a group apart
            close = []
    if len(close) >= min_copies:
        score = float(close[min_copies - 1])
        shown = ", ".join(f"{c:.2f}" for c in close[:5])
        skipped = f"; {len(others)} about other subjects not counted" if others else ""
        return Signal(
            round(min(1.0, score), 4),
            f"{len(close)} other documents say nearly the same (claim cosine {shown} >= {threshold:.2f})"
            + skipped,
        )
    if border <= 0.0 or not neighbors:
        return Signal.none()
    for i, (cos, theirs) in enumerate(zip(cosines, neighbors, strict=False)):
        if cos < border:
            break
        if i in others:
            continue
        own = sorted(paraphrases(c for c in theirs if c >= threshold), reverse=True)
        if len(own) >= min_copies and cos >= own[min_copies - 1] - slack:
            within = f", as close as its own copies ({own[min_copies - 1]:.2f})" if slack < 1.0 else ""
            return Signal(
                round(min(1.0, float(cos)), 4),
                f"close (claim cosine {cos:.2f} >= {border:.2f}) to another document's passage that "
                f"{len(own)} documents say nearly the same as (>= {threshold:.2f}){within}",
            )
    return Signal.none()


def paraphrases(cosines: Iterable[float]) -> list[float]:
    """The cosines of other documents that say this chunk's claim in words of their own: the same
    text (:data:`SAME_TEXT`) left out, documents holding one text (equal cosines) counted once."""
    seen: set[float] = set()
    out = []
    for c in cosines:
        key = round(float(c), 6)
        if c < SAME_TEXT and key not in seen:
            seen.add(key)
            out.append(c)
    return out
