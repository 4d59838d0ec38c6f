"""CRAG's knowledge refinement (papers.md §3): decompose passages into strips, keep the best, recompose.

A retrieved chunk answers the query in a sentence or two and pads it with ~200 words of context the
answer stage would have to read past. Each chunk is cut into sentence strips (the ingest splitter, via
``services.factcheck.text.sentences``), each strip is scored against the query — lexical coverage of
the query's content terms (the document title counts, as in the fact-check) blended with the
embedder's cosine, all strips embedded in one batched call — and the best strips up to a budget are
recomposed in document order, each cited to its document, chunk and character offsets.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from services.common.types import ScoredChunk
from services.common.words import terms
from services.factcheck.evidence import bounded_text
from services.factcheck.text import sentences
from services.orchestrator.corrective.config import GradingSettings
from services.retrieval.embedder import Embedder

MAX_STRIPS_SCORED = 400  # bounded work: strips beyond this (over all passages) are not read
STRIP_WORDS = 60  # a run-on "sentence" longer than this is cut into windows


@dataclass(frozen=True)
class Strip:
    """One kept sentence with its citation: ``text == chunk.text[start:end]`` up to white space."""

    doc_id: str
    chunk_id: str
    start: int
    end: int
    text: str
    score: float
    hit_rank: int  # 0-based rank of its passage in the merged hits
    origin: str = "primary"  # "primary" or the secondary source's name


@dataclass(frozen=True)
class RefinedContext:
    """The recomposed knowledge: strips in document order, grouped by passage."""

    strips: list[Strip]

    @property
    def text(self) -> str:
        """Strips joined per passage, each passage tagged ``[n]`` with its citation number."""
        return "\n".join(
            f"[{n}] {' '.join(s.text for s in group)}" for n, group in enumerate(self.groups(), 1)
        )

    def groups(self) -> list[list[Strip]]:
        out: list[list[Strip]] = []
        for s in self.strips:
            if out and out[-1][0].chunk_id == s.chunk_id and out[-1][0].origin == s.origin:
                out[-1].append(s)
            else:
                out.append([s])
        return out

    def citations(self) -> list[dict[str, object]]:
        """One entry per kept strip: what an answer cites (JSON-ready)."""
        return [
            {"doc_id": s.doc_id, "chunk_id": s.chunk_id, "start": s.start, "end": s.end, "origin": s.origin}
            for s in self.strips
        ]


def locate(text: str, pieces: Sequence[str]) -> list[tuple[int, int]]:
    """Character span of each piece in ``text``; the splitter collapses white space, so each piece is
    matched word by word with any white space between, searching on from the previous match."""
    spans: list[tuple[int, int]] = []
    pos = 0
    for piece in pieces:
        pattern = r"\s+".join(re.escape(w) for w in piece.split())
        m = re.compile(pattern).search(text, pos) if pattern else None
        if m is None:  # not expected (the splitter keeps every word); cite the passage's rest
            spans.append((pos, len(text)))
            continue
        spans.append((m.start(), m.end()))
        pos = m.end()
    return spans


def strip_scores(
    query: str, title: str, strips: Sequence[str], cosines: Sequence[float], lexical_weight: float
) -> list[float]:
    """``lexical_weight``·coverage + (1 − lexical_weight)·cosine per strip, in [0, 1]."""
    q = set(terms(query))
    title_terms = set(terms(title))
    out = []
    for strip, cos in zip(strips, cosines, strict=True):
        coverage = len(q & (set(terms(strip)) | title_terms)) / len(q) if q else 0.0
        out.append(lexical_weight * coverage + (1 - lexical_weight) * max(0.0, min(1.0, cos)))
    return out


def select(
    rows: Sequence[tuple[int, str, int, int]], scores: Sequence[float], settings: GradingSettings
) -> list[int]:
    """Indices of the strips to keep: each passage's best strip and its opening sentence (it names the
    subject the other sentences refer to: multi-hop answers often sit there without a query term),
    passages in rank order; then the best other strips scoring at least ``min_strip_score`` up to
    ``strips`` in all; everything within ``strip_chars``. The first strip is always kept."""
    order = [int(j) for j in np.argsort(-np.asarray(scores), kind="stable")]
    anchors: list[int] = []
    for rank in sorted({r[0] for r in rows}):
        mine = [i for i in order if rows[i][0] == rank]
        opening = min(mine, key=lambda i: rows[i][2])
        anchors += [mine[0], opening]
    fill = [i for i in order if scores[i] >= settings.min_strip_score]
    kept: list[int] = []
    chars = 0
    for n, i in enumerate([*anchors, *fill]):
        if i in kept:
            continue
        if n >= len(anchors) and len(kept) >= settings.strips:
            break
        if kept and chars + len(rows[i][1]) > settings.strip_chars:
            continue
        kept.append(i)
        chars += len(rows[i][1])
    return kept


class KnowledgeRefiner:
    """Turns reranked hits into a :class:`RefinedContext` under the budget in ``GradingSettings``."""

    def __init__(self, embedder: Embedder, settings: GradingSettings) -> None:
        self.embedder = embedder
        self.settings = settings

    def refine(
        self, query: str, hits: Sequence[ScoredChunk], origins: Sequence[str] | None = None
    ) -> RefinedContext:
        """Best strips of ``hits`` (passages best first); ``origins[i]`` names where hit i came from.
        At least one strip is kept whenever there is one (Correct means the set holds the answer)."""
        origins = list(origins) if origins is not None else ["primary"] * len(hits)
        rows: list[tuple[int, str, int, int]] = []  # (hit rank, strip text, start, end)
        for rank, hit in enumerate(hits):
            text = bounded_text(hit.chunk.text)
            pieces = sentences(text, max_words=STRIP_WORDS)
            for piece, (start, end) in zip(pieces, locate(text, pieces), strict=True):
                rows.append((rank, piece, start, end))
                if len(rows) >= MAX_STRIPS_SCORED:
                    break
            if len(rows) >= MAX_STRIPS_SCORED:
                break
        if not rows:
            return RefinedContext([])
        vectors = self.embedder.embed([query, *(r[1] for r in rows)])  # one batched call
        cosines = (vectors[1:] @ vectors[0]).astype(float)
        scores: list[float] = []
        for rank in sorted({r[0] for r in rows}):
            idx = [i for i, r in enumerate(rows) if r[0] == rank]
            scores += strip_scores(
                query,
                hits[rank].chunk.title,
                [rows[i][1] for i in idx],
                [float(cosines[i]) for i in idx],
                self.settings.lexical_weight,
            )
        kept = select(rows, scores, self.settings)
        kept.sort(key=lambda i: (rows[i][0], rows[i][2]))  # passages by rank, strips in text order
        return RefinedContext(
            [
                Strip(
                    doc_id=hits[rows[i][0]].chunk.doc_id,
                    chunk_id=hits[rows[i][0]].chunk.chunk_id,
                    start=rows[i][2],
                    end=rows[i][3],
                    text=rows[i][1],
                    score=round(scores[i], 4),
                    hit_rank=rows[i][0],
                    origin=origins[rows[i][0]],
                )
                for i in kept
            ]
        )
