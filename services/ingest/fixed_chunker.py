"""Fixed-size chunking, kept as the ablation baseline for :mod:`services.ingest.topic_chunker`.

Windows of ``max_words`` words, each starting ``max_words - fixed_overlap_words`` words after the
previous one, over the whole document text: topics and section boundaries are ignored. A chunk keeps
the section path of the section where it starts. Chunk text is the document text from the window's
first word to its last, so line breaks inside a window survive. Headers follow the same rules as the
topic chunker (title, section path, ``header_terms`` salient terms).
"""

from __future__ import annotations

import re

from services.common.types import Chunk, ParsedDocument
from services.ingest.chunk_header import DocTermStats, build_header, salient_terms
from services.ingest.config import ChunkingSettings

__all__ = ["FixedChunker"]

_WORD = re.compile(r"\S+")


class FixedChunker:
    """A :class:`~services.ingest.chunker.Chunker` cutting every N words with overlap."""

    def __init__(self, settings: ChunkingSettings) -> None:
        if settings.fixed_overlap_words >= settings.max_words:
            raise ValueError(
                f"chunking.fixed_overlap_words={settings.fixed_overlap_words} must be below "
                f"max_words={settings.max_words}, or windows would never advance; lower the overlap"
            )
        self._settings = settings

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
        text = parsed.text  # sections joined by blank lines
        # Where each section starts in ``text`` (ParsedDocument.text joins with "\n\n").
        section_starts: list[int] = []
        pos = 0
        for section in parsed.sections:
            section_starts.append(pos)
            pos += len(section.text) + 2

        spans: list[tuple[int, int]] = []
        word_section: list[int] = []
        section_index = 0
        for m in _WORD.finditer(text):
            while section_index + 1 < len(section_starts) and m.start() >= section_starts[section_index + 1]:
                section_index += 1
            spans.append(m.span())
            word_section.append(section_index)
        if not spans:
            return []

        doc_title = title or parsed.title
        stats = DocTermStats.from_text(text) if s.header_terms > 0 else None
        step = s.max_words - s.fixed_overlap_words
        chunks: list[Chunk] = []
        start = 0
        while True:
            end = min(start + s.max_words, len(spans))
            body = text[spans[start][0] : spans[end - 1][1]]
            path = list(parsed.sections[word_section[start]].path)
            terms = (
                salient_terms(body, s.header_terms, doc_stats=stats, exclude=[doc_title, *path])
                if s.header_terms > 0
                else []
            )
            ordinal = len(chunks)
            chunks.append(
                Chunk(
                    chunk_id=f"{doc_id}#{ordinal}",
                    doc_id=doc_id,
                    tenant=tenant,
                    ordinal=ordinal,
                    title=doc_title,
                    section_path=path,
                    header=build_header(doc_title, path, terms),
                    text=body,
                    source=source,
                    version=version,
                )
            )
            if end >= len(spans):
                return chunks
            start += step
