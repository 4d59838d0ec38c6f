"""Topic chunking: TextTiling over sentence embeddings (HAC-Retrieval §1).

Per document:

1. **Sections.** Sections are hard boundaries: a chunk never holds text of two sections, except that a
   section under ``min_words`` words is joined to the next one when that one lies under the same
   parent (``next.path`` starts with ``small.path[:-1]``: a sibling, or a child of the small section),
   repeatedly while the run stays under ``min_words``. A chunk's ``section_path`` is the path of the
   section where it starts, so the chunk holding a small section keeps the small section's (deeper)
   path and later chunks of the next section keep their own. Blank sections are skipped.
2. **Sentences.** Each section is split with :func:`services.ingest.sentences.split_sentence_blocks`,
   with sentences longer than ``max_words`` already cut into word windows.
3. **Short sections are one chunk**, without embedding anything: most sections of most documents fit.
4. **Long sections are tiled.** All sentences of all long sections of the document are embedded in a
   single ``embedder.embed`` call. At each gap between sentences the similarity is the cosine of the
   mean (renormalised) vectors of the ``window_sentences`` sentences before and after it; its depth is
   TextTiling's ``(left peak - s) + (right peak - s)``, peaks found by climbing while similarity does
   not fall. Candidate boundaries are the valleys (local minima of similarity, depth > 0) whose depth is
   at least ``mean - depth_std * std`` of the valley depths, as ``ChunkingSettings`` documents
   (Hearst's liberal cut-off at ``depth_std = 0.5``; a negative ``depth_std`` keeps fewer, deeper
   valleys and so gives longer chunks).
5. **Cut points.** Candidates are accepted greedily, deepest first, when both pieces they create keep
   at least ``min_words`` words. A piece still above ``max_words`` is then split recursively at its
   deepest gap (lowest similarity on ties) among gaps leaving ``min_words`` on each side, or, when no
   gap does, at the gap that splits it most evenly. Sentences never exceed ``max_words`` words, so this
   always ends with every chunk within ``max_words`` (the word windows are the last resort).

Everything is deterministic for a deterministic embedder: ties are broken by position.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from services.common.types import Chunk, ParsedDocument, Section
from services.ingest.chunk_header import DocTermStats, build_header, salient_terms
from services.ingest.config import ChunkingSettings
from services.ingest.sentences import split_sentence_blocks
from services.retrieval.embedder import Embedder

FloatArray = npt.NDArray[np.float64]

__all__ = ["TopicChunker"]


@dataclass
class _Piece:
    """Text chunked as a unit (a section, or small sections merged into the next): its sentences,
    whether each starts a new block, its word count and the section path it came from."""

    sentences: list[str] = field(default_factory=list)
    new_block: list[bool] = field(default_factory=list)
    words: list[int] = field(default_factory=list)
    paths: list[list[str]] = field(default_factory=list)

    @property
    def n_words(self) -> int:
        return sum(self.words)

    def text(self, start: int, end: int) -> str:
        out: list[str] = []
        for i in range(start, end):
            if out:
                out.append("\n" if self.new_block[i] else " ")
            out.append(self.sentences[i])
        return "".join(out)


class TopicChunker:
    """The default :class:`~services.ingest.chunker.Chunker` (see the module docstring)."""

    def __init__(self, settings: ChunkingSettings, embedder: Embedder) -> None:
        self._settings = settings
        self._embedder = embedder

    def chunk(
        self,
        doc_id: str,
        tenant: str,
        parsed: ParsedDocument,
        *,
        title: str = "",
        source: str = "",
        version: int = 1,
    ) -> list[Chunk]:
        s = self._settings
        pieces = [self._piece(group) for group in _merge_small_sections(parsed.sections, s.min_words)]
        pieces = [p for p in pieces if p.sentences]

        # One embed call for every sentence of every section that needs tiling.
        long_pieces = [p for p in pieces if p.n_words > s.max_words]
        vectors: list[FloatArray] = []
        if long_pieces:
            texts = [sentence for p in long_pieces for sentence in p.sentences]
            matrix = np.asarray(self._embedder.embed(texts), dtype=np.float64)
            if matrix.shape[0] != len(texts):
                raise ValueError(f"embedder returned {matrix.shape[0]} vectors for {len(texts)} sentences")
            offset = 0
            for p in long_pieces:
                vectors.append(matrix[offset : offset + len(p.sentences)])
                offset += len(p.sentences)

        spans: list[tuple[_Piece, int, int]] = []
        long_index = 0
        for p in pieces:
            if p.n_words > s.max_words:
                cuts = _cut_points(vectors[long_index], p.words, s)
                long_index += 1
            else:
                cuts = []
            bounds = [0, *cuts, len(p.sentences)]
            spans.extend((p, a, b) for a, b in itertools.pairwise(bounds))

        doc_title = title or parsed.title
        stats = DocTermStats.from_text(parsed.text) if s.header_terms > 0 and spans else None
        chunks: list[Chunk] = []
        for ordinal, (p, a, b) in enumerate(spans):
            body = p.text(a, b)
            path = p.paths[a]  # the section where the chunk starts
            terms = (
                salient_terms(body, s.header_terms, doc_stats=stats, exclude=[doc_title, *path])
                if s.header_terms > 0
                else []
            )
            chunks.append(
                Chunk(
                    chunk_id=f"{doc_id}#{ordinal}",
                    doc_id=doc_id,
                    tenant=tenant,
                    ordinal=ordinal,
                    title=doc_title,
                    section_path=list(path),
                    header=build_header(doc_title, path, terms),
                    text=body,
                    source=source,
                    version=version,
                )
            )
        return chunks

    def _piece(self, sections: list[Section]) -> _Piece:
        piece = _Piece()
        for section in sections:
            for block in split_sentence_blocks(section.text, max_words=self._settings.max_words):
                for i, sentence in enumerate(block):
                    piece.sentences.append(sentence)
                    piece.new_block.append(i == 0)
                    piece.words.append(len(sentence.split()))
                    piece.paths.append(section.path)
        return piece


def _merge_small_sections(sections: list[Section], min_words: int) -> list[list[Section]]:
    """Group sections: a run under ``min_words`` words joins the next section under the same parent."""
    groups: list[list[Section]] = []
    pending: list[Section] = []
    pending_words = 0
    for section in sections:
        n_words = len(section.text.split())
        if n_words == 0:
            continue
        if pending:
            parent = pending[-1].path[:-1]
            if section.path[: len(parent)] != parent:
                groups.append(pending)
                pending, pending_words = [], 0
        pending.append(section)
        pending_words += n_words
        if pending_words >= min_words:
            groups.append(pending)
            pending, pending_words = [], 0
    if pending:
        groups.append(pending)
    return groups


def _gap_similarities(vectors: FloatArray, window: int) -> FloatArray:
    """Cosine similarity at each gap ``g`` (between sentences ``g-1`` and ``g``), for g = 1..n-1."""
    n = vectors.shape[0]
    cumulative = np.vstack([np.zeros((1, vectors.shape[1])), np.cumsum(vectors, axis=0)])
    gaps = np.arange(1, n)
    left = cumulative[gaps] - cumulative[np.maximum(gaps - window, 0)]
    right = cumulative[np.minimum(gaps + window, n)] - cumulative[gaps]
    left_norm = np.linalg.norm(left, axis=1)
    right_norm = np.linalg.norm(right, axis=1)
    denom = np.maximum(left_norm * right_norm, 1e-12)
    sims: FloatArray = np.einsum("ij,ij->i", left, right) / denom
    return sims


def _depth_scores(sims: FloatArray) -> FloatArray:
    """TextTiling depth: climb left and right while similarity does not fall; sum the two rises."""
    m = len(sims)
    left_peak = sims.copy()
    for i in range(1, m):
        if sims[i - 1] >= sims[i]:
            left_peak[i] = left_peak[i - 1]
    right_peak = sims.copy()
    for i in range(m - 2, -1, -1):
        if sims[i + 1] >= sims[i]:
            right_peak[i] = right_peak[i + 1]
    depth: FloatArray = (left_peak - sims) + (right_peak - sims)
    return depth


def _cut_points(vectors: FloatArray, words: list[int], settings: ChunkingSettings) -> list[int]:
    """Sentence indices where chunks start (excluding 0), for one section longer than ``max_words``."""
    n = len(words)
    if n < 2:
        return []
    prefix = [0]
    for w in words:
        prefix.append(prefix[-1] + w)
    sims = _gap_similarities(vectors, settings.window_sentences)  # sims[g - 1] is gap g
    depth = _depth_scores(sims)
    min_w, max_w = settings.min_words, settings.max_words

    # Valleys: strictly below at least one neighbour (depth > 0) and not above either neighbour.
    valleys: list[int] = []
    for g in range(1, n):
        i = g - 1
        if depth[i] <= 0.0:
            continue
        if (i > 0 and sims[i - 1] < sims[i]) or (i < n - 2 and sims[i + 1] < sims[i]):
            continue
        valleys.append(g)
    bounds = [0, n]  # sorted cut points, with both ends
    if valleys:
        valley_depths = np.array([depth[g - 1] for g in valleys])
        cutoff = float(valley_depths.mean() - settings.depth_std * valley_depths.std())
        candidates = sorted((g for g in valleys if depth[g - 1] >= cutoff), key=lambda g: (-depth[g - 1], g))
        for g in candidates:
            at = bisect.bisect_left(bounds, g)
            lo, hi = bounds[at - 1], bounds[at]
            if prefix[g] - prefix[lo] >= min_w and prefix[hi] - prefix[g] >= min_w:
                bounds.insert(at, g)

    # Split what is still too long, recursively, at the best remaining gap.
    cuts = set(bounds[1:-1])
    stack = list(itertools.pairwise(bounds))
    while stack:
        a, b = stack.pop()
        if prefix[b] - prefix[a] <= max_w or b - a < 2:
            continue
        inner = range(a + 1, b)
        balanced = [g for g in inner if prefix[g] - prefix[a] >= min_w and prefix[b] - prefix[g] >= min_w]
        if balanced:
            g = min(balanced, key=lambda g: (-depth[g - 1], sims[g - 1], g))
        else:
            g = max(inner, key=lambda g: (min(prefix[g] - prefix[a], prefix[b] - prefix[g]), -g))
        cuts.add(g)
        stack.extend([(a, g), (g, b)])
    return sorted(cuts)
