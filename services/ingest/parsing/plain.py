"""Plain text: no structure to recover, so one untitled section under path ``[]``."""

from __future__ import annotations

from services.common.types import ParsedDocument
from services.ingest.parsing._sections import SectionBuilder

CONTENT_TYPE = "text/plain"


def parse_plain(text: str) -> ParsedDocument:
    builder = SectionBuilder()
    builder.add(text)
    return builder.build("", what="plain-text document")
