"""Turn uploaded bytes or inline text into a :class:`ParsedDocument` (title + sections).

One entry point per input shape: :func:`parse_bytes` for uploads (type from the declared content
type, else the file extension, else sniffing) and :func:`parse_text` for text sent inline in JSON.
Every failure is a :class:`RampartError` whose message names the bad input and the fix, so the
gateway can return it as is; no parser exception ever escapes raw.
"""

from __future__ import annotations

import codecs
import io
import re
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import PurePath

from services.common.errors import ErrorCode, RampartError, invalid
from services.common.types import ParsedDocument
from services.ingest.parsing import docx as _docx
from services.ingest.parsing import html as _html
from services.ingest.parsing import markdown as _markdown
from services.ingest.parsing import pdf as _pdf
from services.ingest.parsing import plain as _plain

__all__ = ["SUPPORTED_TYPES", "detect_content_type", "parse_bytes", "parse_text"]

PLAIN = _plain.CONTENT_TYPE
MARKDOWN = _markdown.CONTENT_TYPE
HTML = _html.CONTENT_TYPE
PDF = _pdf.CONTENT_TYPE
DOCX = _docx.CONTENT_TYPE

SUPPORTED_TYPES: tuple[str, ...] = (PLAIN, MARKDOWN, HTML, PDF, DOCX)
"""Canonical content types :func:`parse_bytes` accepts (aliases map onto these)."""
TEXT_TYPES: frozenset[str] = frozenset({PLAIN, MARKDOWN, HTML})
"""The subset :func:`parse_text` accepts: binary formats only arrive as uploads."""

EXTENSIONS: dict[str, str] = {
    ".txt": PLAIN,
    ".text": PLAIN,
    ".md": MARKDOWN,
    ".markdown": MARKDOWN,
    ".mdown": MARKDOWN,
    ".html": HTML,
    ".htm": HTML,
    ".xhtml": HTML,
    ".pdf": PDF,
    ".docx": DOCX,
}
_ALIASES = {
    "text/x-markdown": MARKDOWN,
    "text/md": MARKDOWN,
    "application/markdown": MARKDOWN,
    "application/xhtml+xml": HTML,
    "application/x-pdf": PDF,
}
# Declared types that say nothing about the format: fall through to the filename, then sniffing.
_UNSPECIFIED = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/unknown"})
# Leading comments as one stretch from the first "<!--" to some "-->": the same bytes match as with
# ``(?:<!--.*?-->\s*)*``, whose ways to group k comments made it exponential (20 "<!---->" took 0.1 s,
# 40 would take days).
_HTML_SNIFF = re.compile(
    rb"^\s*+(?:<!--.*-->\s*+)?<(?:!doctype\s+html|html|head|body|title|meta|div|p|h[1-6]|table|ul|ol|"
    rb"section|article|main|span|a|br)[\s>/]",
    re.IGNORECASE | re.DOTALL,
)
_META_CHARSET = re.compile(rb"<meta[^>]+charset\s*=\s*[\"']?\s*([A-Za-z0-9_\-:.]+)", re.IGNORECASE)
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def _supported_list() -> str:
    by_type: dict[str, list[str]] = {t: [] for t in SUPPORTED_TYPES}
    for ext, ctype in EXTENSIONS.items():
        by_type[ctype].append(ext)
    return ", ".join(f"{t} ({' '.join(exts)})" for t, exts in by_type.items())


def _unsupported(what: str) -> RampartError:
    return RampartError(
        ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        f"unsupported document type {what}; supported types: {_supported_list()}",
        supported=list(SUPPORTED_TYPES),
    )


def _split_content_type(content_type: str | None) -> tuple[str, str | None]:
    """``"Text/HTML; charset=UTF-8"`` -> ``("text/html", "utf-8")``."""
    if not content_type:
        return "", None
    media, _, params = content_type.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'").lower()
    return media.strip().lower(), charset


def _canonical(media: str) -> str | None:
    if media in SUPPORTED_TYPES:
        return media
    return _ALIASES.get(media)


def _sniff(data: bytes) -> str | None:
    if data.lstrip()[:5] == b"%PDF-":
        return PDF
    if data.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                if "word/document.xml" in archive.namelist():
                    return DOCX
        except Exception:
            return None
        return None
    head = data[:2048]
    for bom, _ in _BOMS:
        if head.startswith(bom):
            head = head[len(bom) :]
            break
    if _HTML_SNIFF.match(head):
        return HTML
    return None


def detect_content_type(data: bytes, *, filename: str | None = None, content_type: str | None = None) -> str:
    """Canonical type from the declared type, else the extension, else the bytes themselves.

    Raises UNSUPPORTED_MEDIA_TYPE when the declared type or extension names a format we do not
    parse, or nothing identifies the bytes (valid UTF-8 without an extension counts as plain text).
    """
    media, _ = _split_content_type(content_type)
    if media not in _UNSPECIFIED:
        canonical = _canonical(media)
        if canonical is None:
            raise _unsupported(f"{media!r} (from the declared content type)")
        return canonical
    suffix = PurePath(filename).suffix.lower() if filename else ""
    if suffix in EXTENSIONS:
        return EXTENSIONS[suffix]
    sniffed = _sniff(data)
    if sniffed is not None:
        return sniffed
    if suffix:
        raise _unsupported(f"{suffix!r} (file {filename!r})")
    if b"\x00" not in data[:8192]:
        try:
            data.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            return PLAIN
    raise _unsupported(
        "(no content type or known file extension, and the bytes are not a recognisable format); "
        "send the content type or a file name with its extension"
    )


def _label(filename: str | None) -> str:
    return repr(filename) if filename else "the document"


def decode_text(
    data: bytes, *, charset: str | None = None, filename: str | None = None, html: bool = False
) -> str:
    """Bytes of a text format to str: BOM, then declared charset, then ``<meta charset>``, else UTF-8."""
    label = _label(filename)
    encoding = charset or "utf-8"
    for bom, bom_encoding in _BOMS:
        if data.startswith(bom):
            data, encoding = data[len(bom) :], bom_encoding
            break
    else:
        if charset is None and html:
            match = _META_CHARSET.search(data[:1024])
            if match:
                encoding = match.group(1).decode("ascii", "replace").lower()
    try:
        codec = codecs.lookup(encoding).name
    except LookupError:
        raise invalid(
            f"{label} declares the unknown character set {encoding!r}; re-save it as UTF-8",
            charset=encoding,
        ) from None
    if not codec.startswith("utf-16"):
        nuls = data.count(b"\x00")
        if nuls and nuls * 10 > len(data):
            first = data.index(b"\x00")
            raise invalid(
                f"{label} looks like binary data, not {encoding} text ({nuls} NUL bytes, the first at "
                f"byte offset {first}); upload PDF/DOCX files with their content type, "
                "or re-save text (e.g. UTF-16) as UTF-8",
                offset=first,
            )
    try:
        return data.decode(codec)
    except UnicodeDecodeError as exc:
        bad = data[exc.start : exc.start + 1].hex()
        hint = ""
        sniffed = _sniff(data)
        if sniffed in (PDF, DOCX):
            hint = f" (it looks like {sniffed}; send that content type)"
        name = "UTF-8" if codec == "utf-8" else encoding
        raise invalid(
            f"{label} is not valid {name} text: invalid byte 0x{bad} at byte offset {exc.start}{hint}; "
            "re-save it as UTF-8, or declare its charset in the content type",
            offset=exc.start,
        ) from None


@contextmanager
def _no_raw_errors(what: str) -> Iterator[None]:
    """Last line of defence: a parser bug on odd input still becomes a clear RampartError."""
    try:
        yield
    except RampartError:
        raise
    except RecursionError as exc:
        raise invalid(f"could not parse {what}: it is nested too deeply to process") from exc
    except Exception as exc:
        reason = (str(exc) or type(exc).__name__)[:300]
        raise invalid(f"could not parse {what} ({type(exc).__name__}: {reason}); check the file") from exc


def _parse_text_as(text: str, ctype: str) -> ParsedDocument:
    if ctype == MARKDOWN:
        return _markdown.parse_markdown(text)
    if ctype == HTML:
        return _html.parse_html(text)
    return _plain.parse_plain(text)


def parse_text(text: str, content_type: str) -> ParsedDocument:
    """Parse inline text/plain, text/markdown or text/html (as sent in a JSON body)."""
    media, _ = _split_content_type(content_type)
    ctype = _canonical(media or PLAIN)
    if ctype in (PDF, DOCX):
        raise RampartError(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            f"content type {media!r} cannot be sent as inline text; upload the file instead",
            supported=sorted(TEXT_TYPES),
        )
    if ctype is None:
        raise RampartError(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            f"unsupported content type {media!r} for inline text; use one of {', '.join(sorted(TEXT_TYPES))}",
            supported=sorted(TEXT_TYPES),
        )
    if not isinstance(text, str):
        raise invalid(f"inline text must be a string, got {type(text).__name__}")
    if not text.strip():
        raise invalid("document text is empty; send the document's content")
    with _no_raw_errors(f"the {ctype} text"):
        return _parse_text_as(text, ctype)


def parse_bytes(
    data: bytes,
    *,
    filename: str | None = None,
    content_type: str | None = None,
    max_pdf_pages: int = _pdf.DEFAULT_MAX_PAGES,
    max_docx_uncompressed: int = _docx.DEFAULT_MAX_UNCOMPRESSED,
) -> ParsedDocument:
    """Parse an uploaded file of any supported type."""
    if isinstance(data, bytearray | memoryview):
        data = bytes(data)
    if not isinstance(data, bytes):
        raise invalid(f"parse_bytes needs bytes, got {type(data).__name__}; use parse_text for str")
    if not data:
        raise invalid(f"{_label(filename)} is empty (0 bytes); upload the file's content", filename=filename)
    ctype = detect_content_type(data, filename=filename, content_type=content_type)
    with _no_raw_errors(f"{_label(filename)} as {ctype}"):
        if ctype == PDF:
            return _pdf.parse_pdf(data, max_pages=max_pdf_pages)
        if ctype == DOCX:
            return _docx.parse_docx(data, max_uncompressed=max_docx_uncompressed)
        _, charset = _split_content_type(content_type)
        text = decode_text(data, charset=charset, filename=filename, html=ctype == HTML)
        if not text.strip():
            raise invalid(f"{_label(filename)} contains only whitespace; upload the file's content")
        return _parse_text_as(text, ctype)
