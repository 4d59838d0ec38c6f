"""Altered-copy detector: a passage that repeats an older document word for word but for one claim.

A counterfactual attack that wants to be believed does not write new prose: it takes a genuine
passage that answers the question and swaps the answer ("... at Raymond James Stadium in Tampa,
Florida" becomes "... in Glendale, Arizona"), then plants the copy beside the original. Every other
signal sees a fluent, relevant, on-topic passage; what gives it away is its history. Nobody who writes
independently reproduces another document's sentences and changes only the fact they state.

What the search reports (``CopyEdit``: an older near-copy sharing most of the passage's words, and the
spans the passage replaced) is an alteration of a claim only when

- a replaced span carries content on both sides (a stop word or a spelling fixed is a copy edited, not
  a claim changed: ``seris`` → ``series``);
- no replaced word names the subject: not a word of either chunk's title or section (``heading``: the
  2014 page of a template family beside the 2015 one), and the query names nothing only one of them
  says (the question names the thing it asks about: "leave in France" against the page for Germany;
  a query word both say, "Splatoon 2" in both, is no such name);
- each replaced span is short (:data:`MAX_SPAN_WORDS`): an answer is a name, a number or a date, while
  two snippets of one article cut at different places differ by a clause;
- it changes at most :data:`MAX_CLAIMS` different things. A template sibling differs in many values at
  once (a season's dates, scores and coach); an edit that plants one false answer changes that answer,
  however often it repeats it.

Scanned query-free over the clean corpora here (HotpotQA-500, SciFact, 2WikiMultihopQA-164 and the four
classic collections, 15,832 documents), these tests find 2 documents, both a later edition of a CISI
report; what they catch on RGB's counterfactual set: docs/journal/2026-11-29-altered-copies.md.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

from services.common.types import CopyEdit
from services.common.words import STOP_WORDS
from services.factcheck.detectors import Signal

MAX_CLAIMS = 2  # one answer swapped, possibly in two forms ("2015" and "2015 season"): not a fitted value
MAX_SPAN_WORDS = 4  # an answer is a name, a number or a date; a longer span replaced is a rewrite
SPELLING = 0.8  # character similarity above which two word-only spans are one word spelt two ways


def altered_copy(edits: Sequence[CopyEdit] | None, query_terms: Iterable[str]) -> Signal:
    """The first of ``edits`` that alters a claim of its older copy, with the spans swapped as
    evidence; none when every edit is a copy, a spelling fix or another subject."""
    asked = set(query_terms)
    for edit in edits or ():
        claims = _claims(edit, asked)
        if claims:
            swapped = "; ".join(f"'{old}' → '{new}'" for old, new in claims)
            return Signal(1.0, f"an older document ({edit.doc_id}) says the same but {swapped}")
    return Signal.none()


def _claims(edit: CopyEdit, asked: set[str]) -> list[tuple[str, str]]:
    """The claims ``edit`` changed, or none when it is not an alteration of one thing the copy says."""
    if edit.heading or asked & set(edit.one_sided):
        return []  # a replaced word names the subject, or the query names what only one of them says
    changed: list[tuple[str, str]] = []
    for old, new in edit.replaced:
        a, b = old.split(), new.split()
        if max(len(a), len(b)) > MAX_SPAN_WORDS:
            return []  # a clause rewritten: another text built on the same one, not a claim swapped
        if not (_content(a) and _content(b)) or _spelling(old, new):
            continue
        if (old, new) not in changed:
            changed.append((old, new))
    return changed if len(changed) <= MAX_CLAIMS else []


def _content(span: list[str]) -> bool:
    """Whether a replaced span says something: a word that is not a stop word ("U.S." is two letters)."""
    return any(w not in STOP_WORDS for w in span)


def _spelling(old: str, new: str) -> bool:
    """The same word(s) spelt differently: no digits, and most characters shared."""
    if any(ch.isdigit() for ch in old + new):
        return False
    return difflib.SequenceMatcher(a=old, b=new, autojunk=False).ratio() >= SPELLING
