"""Chunk headers: title, section path and the chunk's salient terms.

The header is put before the chunk body in the indexed text, both for BM25 and for the embedding
(HAC-Retrieval's ``Encode(header; chunk)``), so a chunk that never repeats its document's title or
section heading can still match queries about them. Headers are kept short, because every header word
takes part of the embedding model's limited input.

Salient terms (:func:`salient_terms`) are a TF-IDF computed inside one document:

    score(t) = tf_chunk(t) * log(1 + N / df_doc(t))

where ``tf_chunk`` is the number of times ``t`` occurs in the chunk, ``N`` the number of sentences of
the document and ``df_doc`` the number of those sentences that contain ``t``. A term repeated in the
chunk but rare in the rest of the document scores high; a word used all over the document (its
subject, already in the title) scores low. Without the document every term gets the same weight and
the score is plain term frequency.

Candidates are unigrams and bigrams, compared lower-cased and stemmed (so "policy" and "policies"
are one term), with stop words removed. A unigram needs at least three characters and may not be a
plain number. A bigram is two adjacent candidate words in one sentence with nothing but white space
between them (numbers allowed on one side: "16 weeks") and must occur at least twice in the chunk: a
bigram seen once is nearly always an accident of word order. When a bigram is chosen it replaces the
unigrams it contains. Ties go to the term that occurs first. Terms are returned in the surface form the
chunk uses most often (a lower-case form wins a tie, so a sentence-initial capital does not stick).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from services.common.words import JOINED_WORD, KEY_TERM_STOP_WORDS, stem
from services.ingest.sentences import split_sentences

__all__ = ["DocTermStats", "build_header", "salient_terms"]

_NUMBER = re.compile(r"[\d.,:/\-]+")
_MAX_TITLE_CHARS = 150
_MAX_SECTION_PART_CHARS = 80
_MAX_SECTION_DEPTH = 4

# One candidate occurrence: (key, surface, is_bigram). The key is lower-cased and stemmed (a bigram's
# two stems joined by a space); the surface is the text as written, possessive 's removed.
_Occurrence = tuple[str, str, bool]


def _candidates(sentence: str) -> list[_Occurrence]:
    """Candidate unigrams and bigrams of one sentence, in text order."""
    out: list[_Occurrence] = []
    prev: tuple[str, str, bool, int] | None = None  # (key, surface, is_number, end offset)
    for m in JOINED_WORD.finditer(sentence):
        surface = m.group(0)
        if surface[-2:] in ("'s", "’s"):
            surface = surface[:-2]
        low = surface.lower()
        if "’" in low:
            low = low.replace("’", "'")
        if low in KEY_TERM_STOP_WORDS or not low:
            prev = None
            continue
        is_number = low[0].isdigit() and _NUMBER.fullmatch(low) is not None
        if not is_number and len(low) < 2:
            prev = None
            continue
        key = low if is_number else stem(low)
        if not is_number and len(low) >= 3:
            out.append((key, surface, False))
        start = m.start()
        if (
            prev is not None
            and sentence[prev[3] : start].isspace()
            and not (prev[2] and is_number)
            and (len(prev[1]) >= 3 or len(low) >= 3)
        ):
            out.append((f"{prev[0]} {key}", f"{prev[1]} {surface}", True))
        prev = (key, surface, is_number, m.end())
    return out


@dataclass(frozen=True)
class DocTermStats:
    """Sentence document frequencies of one document's candidate terms (see the module docstring).

    Also keeps each sentence's candidates, so scoring the document's chunks does not tokenise the
    same sentences again.
    """

    n_sentences: int
    df: dict[str, int]
    sentence_candidates: dict[str, list[_Occurrence]] = field(default_factory=dict, repr=False)

    @classmethod
    def from_text(cls, doc_text: str) -> DocTermStats:
        df: dict[str, int] = {}
        cache: dict[str, list[_Occurrence]] = {}
        sentences = split_sentences(doc_text)
        for sentence in sentences:
            found = cache.get(sentence)
            if found is None:
                found = cache[sentence] = _candidates(sentence)
            for key in {c[0] for c in found}:
                df[key] = df.get(key, 0) + 1
        return cls(n_sentences=max(1, len(sentences)), df=df, sentence_candidates=cache)

    def idf(self, key: str) -> float:
        # A term missing from the document (the chunk was not cut from it) counts as seen once.
        return math.log(1.0 + self.n_sentences / max(1, self.df.get(key, 0)))

    def candidates(self, sentence: str) -> list[_Occurrence]:
        found = self.sentence_candidates.get(sentence)
        return found if found is not None else _candidates(sentence)


def salient_terms(
    text: str,
    k: int,
    *,
    doc_text: str | None = None,
    doc_stats: DocTermStats | None = None,
    exclude: Iterable[str] = (),
) -> list[str]:
    """The ``k`` most salient terms of ``text`` (a chunk), best first, in their surface form.

    ``doc_text`` is the whole document the chunk was cut from; pass ``doc_stats`` instead (built once
    with :meth:`DocTermStats.from_text`) when scoring many chunks of one document. ``exclude`` holds
    words already in the header (title, section names): a candidate made only of such words is skipped.
    """
    if k <= 0:
        return []
    if doc_stats is None and doc_text is not None:
        doc_stats = DocTermStats.from_text(doc_text)
    excluded = {stem(w.lower()) for t in exclude for w in JOINED_WORD.findall(t)}

    tf: dict[str, int] = {}
    first_seen: dict[str, int] = {}
    forms: dict[str, dict[str, int]] = {}
    is_bigram: dict[str, bool] = {}
    position = 0
    for sentence in split_sentences(text):
        found = doc_stats.candidates(sentence) if doc_stats is not None else _candidates(sentence)
        for key, surface, bigram in found:
            if excluded and all(part in excluded for part in key.split(" ")):
                continue
            tf[key] = tf.get(key, 0) + 1
            first_seen.setdefault(key, position)
            position += 1
            counts = forms.setdefault(key, {})
            counts[surface] = counts.get(surface, 0) + 1
            is_bigram[key] = bigram

    scored: list[tuple[float, int, str]] = []
    for key, count in tf.items():
        if is_bigram[key] and count < 2:
            continue
        weight = doc_stats.idf(key) if doc_stats is not None else 1.0
        scored.append((-(count * weight), first_seen[key], key))
    scored.sort()

    chosen: list[str] = []
    for _, _, key in scored:
        parts = key.split(" ")
        if is_bigram[key]:
            chosen = [c for c in chosen if c not in parts]  # the bigram replaces its unigrams
        elif any(is_bigram[c] and key in c.split(" ") for c in chosen):
            continue
        chosen.append(key)
        if len(chosen) >= k:
            break
    return [_surface(forms[key]) for key in chosen[:k]]


def _surface(counts: dict[str, int]) -> str:
    # Most frequent form; on a tie prefer the lower-case one, then the first seen (dicts keep order).
    best = max(counts.items(), key=lambda item: (item[1], item[0] == item[0].lower()))
    return best[0]


def _clean(part: str, limit: int) -> str:
    part = " ".join(part.split()).replace("|", "/")
    return part if len(part) <= limit else part[: limit - 1].rstrip() + "…"


def build_header(title: str, section_path: list[str], terms: list[str]) -> str:
    """``"Title: … | Section: A > B | Key terms: x, y"``, leaving out empty parts ("" if all are)."""
    parts: list[str] = []
    title = _clean(title, _MAX_TITLE_CHARS)
    if title:
        parts.append(f"Title: {title}")
    path = [p for p in (_clean(s, _MAX_SECTION_PART_CHARS) for s in section_path) if p]
    if len(path) > _MAX_SECTION_DEPTH:  # keep the top level and the deepest levels
        path = [path[0], "…", *path[-(_MAX_SECTION_DEPTH - 1) :]]
    if path:
        parts.append(f"Section: {' > '.join(path)}")
    cleaned = [t for t in (_clean(t, _MAX_SECTION_PART_CHARS) for t in terms) if t]
    if cleaned:
        parts.append(f"Key terms: {', '.join(cleaned)}")
    return " | ".join(parts)
