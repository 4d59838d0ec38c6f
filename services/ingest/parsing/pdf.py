"""PDF via pypdf: text per page, sections from the outline (bookmarks) when the file has one.

Outline entries only say which page a heading is on, so the heading text is looked up in that
page's extracted text to split mid-page; without an outline every page is its own section.
"""

from __future__ import annotations

import io
import re
from typing import Any

from pypdf import PasswordType, PdfReader
from pypdf.generic import Destination

from services.common.errors import ErrorCode, RampartError, invalid
from services.common.types import ParsedDocument
from services.ingest.parsing._sections import SectionBuilder, clean_inline, clean_text, no_text_error

CONTENT_TYPE = "application/pdf"
DEFAULT_MAX_PAGES = 2000
_MAX_OUTLINE_ENTRIES = 5000
_MAX_OUTLINE_DEPTH = 12


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _open(data: bytes) -> PdfReader:
    try:
        reader = PdfReader(io.BytesIO(data), strict=False)
    except Exception as exc:
        if b"/Encrypt" in data:
            raise _encrypted(_reason(exc)) from exc
        raise invalid(
            f"the file is not a readable PDF ({_reason(exc)}); check that it is a complete, "
            "uncorrupted PDF, or re-export it from the source application",
        ) from exc
    if reader.is_encrypted:
        try:
            # pypdf already tried the empty user password; owner-only protection opens fine.
            ok = reader.decrypt("") != PasswordType.NOT_DECRYPTED
        except Exception as exc:
            raise _encrypted(_reason(exc)) from exc
        if not ok:
            raise _encrypted("a password is required to open it")
    return reader


def _encrypted(reason: str) -> RampartError:
    return invalid(
        f"the PDF is encrypted ({reason}); remove the password protection (e.g. print/save it as an "
        "unprotected PDF) and upload it again",
    )


def _flatten_outline(reader: PdfReader) -> list[tuple[int, int, str]]:
    """``(page_index, level, title)`` for every usable bookmark, in outline order."""
    entries: list[tuple[int, int, str]] = []

    def visit(items: list[Any], level: int) -> None:
        for item in items:
            if len(entries) >= _MAX_OUTLINE_ENTRIES:
                return
            if isinstance(item, list):
                if level < _MAX_OUTLINE_DEPTH:
                    visit(item, level + 1)
            elif isinstance(item, Destination):
                page = reader.get_destination_page_number(item)
                title = clean_inline(str(item.title or ""))
                if page is not None and page >= 0 and title:
                    entries.append((page, level, title))

    try:
        visit(list(reader.outline), 1)
    except Exception:
        return []  # a broken outline is not a broken document: fall back to page sections
    return entries


def _heading_pattern(title: str) -> re.Pattern[str]:
    # Extraction may re-break lines or drop spaces inside a heading, so words match loosely.
    words = [re.escape(w) for w in title.split()[:30]]
    return re.compile(r"\s*".join(words), re.IGNORECASE)


def _metadata_title(reader: PdfReader) -> str:
    try:
        meta = reader.metadata
        return str(meta.title or "") if meta is not None else ""
    except Exception:
        return ""


def parse_pdf(data: bytes, *, max_pages: int = DEFAULT_MAX_PAGES) -> ParsedDocument:
    """Parse PDF bytes; refuse more than ``max_pages`` pages rather than silently truncating."""
    reader = _open(data)
    try:
        page_count = len(reader.pages)
    except Exception as exc:
        raise invalid(f"the PDF's page tree is unreadable ({_reason(exc)}); re-export the PDF") from exc
    if page_count > max_pages:
        raise RampartError(
            ErrorCode.PAYLOAD_TOO_LARGE,
            f"the PDF has {page_count} pages, more than the limit of {max_pages}; "
            "split it into smaller documents",
            pages=page_count,
            max_pages=max_pages,
        )
    texts: list[str] = []
    for index in range(page_count):
        try:
            texts.append(reader.pages[index].extract_text() or "")
        except Exception as exc:
            raise invalid(
                f"could not extract text from page {index + 1} of the PDF ({_reason(exc)}); "
                "re-export the PDF",
                page=index + 1,
            ) from exc

    builder = SectionBuilder()
    outline = _flatten_outline(reader)
    if outline:
        by_page: dict[int, list[tuple[int, str]]] = {}
        for page, level, title in outline:
            by_page.setdefault(page, []).append((level, title))
        for index, text in enumerate(texts):
            cursor = 0
            for level, title in by_page.get(index, []):
                match = _heading_pattern(title).search(text, cursor)
                if match:
                    builder.add(text[cursor : match.start()])
                    cursor = match.end()
                builder.heading(level, title)
            builder.add(text[cursor:])
    else:
        for index, text in enumerate(texts):
            builder.heading(1, f"Page {index + 1}")
            builder.add(text)
    if not any(clean_text(t) for t in texts):
        raise no_text_error("PDF", ocr_hint=True)
    return builder.build(_metadata_title(reader), what="PDF", ocr_hint=True)
