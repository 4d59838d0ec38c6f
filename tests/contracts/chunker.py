"""The ``Chunker`` contract (services/ingest/chunker.py): what ingest relies on from whatever cuts a
parsed document into chunks. Subclass :class:`ChunkerContract` in the implementation's own test file
and provide ``make_chunker`` (tests/README.md).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from services.common.types import ParsedDocument, Section
from services.ingest.chunker import Chunker
from services.ingest.config import ChunkingSettings

MAKE_CHUNKER = Callable[[ChunkingSettings], Chunker]  # make_chunker(settings) -> the chunker under test

PARSED = ParsedDocument(
    title="Leave policy",
    sections=[
        Section(
            path=["Leave", "Parental"],
            text=" ".join(
                f"Parental leave rule {i} grants sixteen paid weeks to employees." for i in range(12)
            ),
        ),
        Section(
            path=["Travel"],
            text=" ".join(f"Travel rule {i} books economy flights through the portal." for i in range(12)),
        ),
    ],
)


class ChunkerContract:
    """Every ``Chunker`` keeps these promises: chunks carry ordinals ``0..n-1`` and ids
    ``<doc_id>#<n>``, the document's id, tenant, title, source and version; no chunk is empty or
    longer than ``max_words``; together they hold every word of the document, in order; the cut
    is deterministic; a document without text gives no chunks. Each chunk has a header naming the
    title.

    Provide ``make_chunker``: called with ``ChunkingSettings``, it returns the implementation under
    test built on them.
    """

    @pytest.fixture()
    def make_chunker(self) -> MAKE_CHUNKER:
        raise NotImplementedError(
            f"{type(self).__name__} must provide the make_chunker fixture: make_chunker(settings) returns "
            "the chunker under test (tests/README.md)"
        )

    def test_chunks_are_numbered_and_carry_the_document(self, make_chunker: MAKE_CHUNKER) -> None:
        chunker = make_chunker(ChunkingSettings(min_words=10, max_words=40, fixed_overlap_words=0))
        chunks = chunker.chunk("leave", "acme", PARSED, title="Leave policy", source="wiki/leave", version=3)
        assert len(chunks) > 1
        assert [c.ordinal for c in chunks] == list(range(len(chunks)))
        assert [c.chunk_id for c in chunks] == [f"leave#{i}" for i in range(len(chunks))]
        assert {(c.doc_id, c.tenant, c.title, c.source, c.version) for c in chunks} == {
            ("leave", "acme", "Leave policy", "wiki/leave", 3)
        }
        assert all("Leave policy" in c.header for c in chunks)

    def test_chunks_are_bounded_and_keep_every_word_in_order(self, make_chunker: MAKE_CHUNKER) -> None:
        chunker = make_chunker(ChunkingSettings(min_words=10, max_words=40, fixed_overlap_words=0))
        chunks = chunker.chunk("leave", "acme", PARSED)
        assert all(c.text.strip() and len(c.text.split()) <= 40 for c in chunks)
        assert [w for c in chunks for w in c.text.split()] == PARSED.text.split()
        assert chunker.chunk("leave", "acme", PARSED) == chunks  # deterministic

    def test_a_document_without_text_gives_no_chunks(self, make_chunker: MAKE_CHUNKER) -> None:
        blank = ParsedDocument(title="T", sections=[Section(path=[], text="  \n ")])
        assert make_chunker(ChunkingSettings()).chunk("d", "t", blank) == []
