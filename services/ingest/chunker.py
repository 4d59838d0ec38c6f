"""The ``Chunker`` protocol and its one factory.

``topic`` (default) cuts at topic boundaries found from embedding similarity between neighbouring
sentence windows (HAC-Retrieval §1, TextTiling-style); ``fixed`` cuts every N words with overlap and
stays for ablation. Both give every chunk a header (title, section path, salient terms).
"""

from __future__ import annotations

from typing import Protocol

from services.common.types import Chunk, ParsedDocument
from services.ingest.config import ChunkingSettings
from services.retrieval.embedder import Embedder


class Chunker(Protocol):
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
        """Split one parsed document into chunks with headers, ordinals 0..n-1, ids ``<doc_id>#<n>``."""
        ...


def build_chunker(settings: ChunkingSettings, embedder: Embedder | None) -> Chunker:
    if settings.method == "fixed":
        from services.ingest.fixed_chunker import FixedChunker

        return FixedChunker(settings)
    if embedder is None:
        raise ValueError("chunking.method='topic' needs an embedder; build the models or use method='fixed'")
    from services.ingest.topic_chunker import TopicChunker

    return TopicChunker(settings, embedder)
