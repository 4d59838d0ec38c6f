"""DOCX via python-docx: "Title"/"Heading N" paragraph styles give the path, tables are kept.

The zip is inspected before python-docx touches it: declared uncompressed sizes are what
``zipfile`` will inflate at most, so summing them bounds the memory a decompression bomb can take.
"""

from __future__ import annotations

import io
import re
import zipfile
from typing import Any

import docx
from docx.table import Table
from docx.text.paragraph import Paragraph

from services.common.errors import ErrorCode, RampartError, invalid
from services.common.types import ParsedDocument
from services.ingest.parsing._sections import SectionBuilder, clean_inline

CONTENT_TYPE = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
DEFAULT_MAX_UNCOMPRESSED = 100 * 1024 * 1024
_MAX_ZIP_ENTRIES = 10_000
_MAX_TABLE_DEPTH = 16
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_HEADING_STYLE = re.compile(r"^heading\s*([1-9])$", re.IGNORECASE)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def check_zip(data: bytes, *, max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED) -> None:
    """Refuse non-zips, zips without a Word body and zips that would inflate past the limit."""
    if data.startswith(_OLE_MAGIC):
        raise invalid(
            "the file is an OLE compound document, not a .docx: either a legacy Word .doc or a "
            "password-protected .docx; save it as an unprotected .docx and upload again",
        )
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            infos = archive.infolist()
    except Exception as exc:
        raise invalid(
            f"the file is not a readable DOCX (zip) archive ({_reason(exc)}); check that the upload "
            "is complete, or re-save it from Word as .docx",
        ) from exc
    total = sum(info.file_size for info in infos)
    if len(infos) > _MAX_ZIP_ENTRIES or total > max_uncompressed:
        raise RampartError(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"the DOCX would expand to {total} bytes in {len(infos)} parts, over the limit of "
            f"{max_uncompressed} bytes / {_MAX_ZIP_ENTRIES} parts (possible zip bomb); "
            "split the document or remove embedded media",
            uncompressed_bytes=total,
            max_uncompressed_bytes=max_uncompressed,
        )
    if not any(info.filename == "word/document.xml" for info in infos):
        raise invalid(
            "the file is a zip archive but not a Word document (no word/document.xml); "
            "upload a .docx, or send the right content type",
        )


def _heading_level(paragraph: Paragraph) -> int | None:
    """0 for Title, N for Heading N, following ``basedOn`` so custom heading styles count too."""
    style: Any = paragraph.style
    for _ in range(8):
        if style is None:
            return None
        for name in (style.name or "", style.style_id or ""):
            if name.lower() == "title":
                return 0
            match = _HEADING_STYLE.match(name)
            if match:
                return int(match.group(1))
        style = style.base_style
    return None


def _table_text(table: Table, depth: int = 0) -> str:
    rows: list[str] = []
    for row in table.rows:
        cells: list[str] = []
        seen: list[Any] = []
        for cell in row.cells:
            # A merged cell appears once per grid column it spans; keep it once.
            if any(cell._tc is tc for tc in seen):
                continue
            seen.append(cell._tc)
            parts: list[str] = []
            for item in cell.iter_inner_content():
                if isinstance(item, Paragraph):
                    parts.append(item.text)
                elif depth < _MAX_TABLE_DEPTH:
                    parts.append(_table_text(item, depth + 1))
            cells.append(" ".join(" ".join(parts).split()))
        line = " | ".join(c for c in cells if c)
        if line:
            rows.append(line)
    return "\n".join(rows)


def parse_docx(data: bytes, *, max_uncompressed: int = DEFAULT_MAX_UNCOMPRESSED) -> ParsedDocument:
    """Title from core properties, else the first Title-style (then Heading 1) paragraph."""
    check_zip(data, max_uncompressed=max_uncompressed)
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:
        raise invalid(
            f"the DOCX could not be opened ({_reason(exc)}); re-save it from Word as .docx",
        ) from exc
    builder = SectionBuilder()
    title = ""
    first_title_style = ""
    first_h1 = ""
    try:
        title = clean_inline(document.core_properties.title or "")
    except Exception:
        title = ""  # broken docProps/core.xml: the body is still worth indexing
    try:
        for item in document.iter_inner_content():
            if isinstance(item, Table):
                builder.add(_table_text(item))
                continue
            level = _heading_level(item)
            text = item.text
            if level is None:
                builder.add(text)
                continue
            if level == 0 and not first_title_style:
                first_title_style = clean_inline(text)
            elif level == 1 and not first_h1:
                first_h1 = clean_inline(text)
            builder.heading(level, text)
    except Exception as exc:
        raise invalid(
            f"the DOCX body could not be read ({_reason(exc)}); re-save it from Word as .docx",
        ) from exc
    return builder.build(title or first_title_style or first_h1, what="DOCX document (images are not OCRed)")
