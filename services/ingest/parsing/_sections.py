"""Shared text cleaning and heading-path bookkeeping for every format parser.

Each parser only knows how to walk its format; turning "a heading of level N" and "a block of text"
into :class:`Section` objects, and cleaning text the same way everywhere, lives here so every format
produces comparable output for the chunker.
"""

from __future__ import annotations

import re
import unicodedata

from services.common.errors import RampartError, invalid
from services.common.types import ParsedDocument, Section

# Line-ish separators become newlines before control characters are stripped, so a form feed
# between PDF pages or a Unicode paragraph separator still splits words.
_NEWLINES = str.maketrans({"\x0b": "\n", "\x0c": "\n", "\x85": "\n", "\u2028": "\n", "\u2029": "\n\n"})
# C0/C1 controls except \t and \n, lone surrogates (unencodable, from JSON "\ud800") and invisible
# characters that only break term matching (BOM, zero-width space, word joiner, soft hyphen).
_JUNK = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufeff\u200b\u2060\u00ad]")
_BLANK_RUN = re.compile(r"\n{3,}")


def clean_text(text: str) -> str:
    """NFC, no control characters, single spaces within lines, at most one blank line in a row."""
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = _JUNK.sub("", text.translate(_NEWLINES))
    # str.split() with no argument splits on every Unicode space (tab, NBSP, thin space...).
    lines = [" ".join(line.split()) for line in text.split("\n")]
    return _BLANK_RUN.sub("\n\n", "\n".join(lines)).strip()


def clean_inline(text: str) -> str:
    """Like :func:`clean_text` but on one line: for headings and titles."""
    return " ".join(clean_text(text).split())


def no_text_error(what: str, *, ocr_hint: bool = False) -> RampartError:
    """The one error for "parsed fine but nothing to index", so callers can match its wording."""
    hint = (
        " (scanned PDF? OCR is not supported; upload a PDF with a text layer)"
        if ocr_hint
        else "; it is empty or contains only markup/whitespace"
    )
    return invalid(f"no text could be extracted from the {what}{hint}")


class SectionBuilder:
    """Collects text blocks under the current heading path.

    Headings form a stack: a heading of level N closes every open heading of level >= N, so
    ``# A`` / ``## B`` / ``## C`` yields paths ``[A]``, ``[A, B]``, ``[A, C]``. Text before the first
    heading lands under ``[]``.
    """

    def __init__(self) -> None:
        self._stack: list[tuple[int, str]] = []
        self._blocks: list[str] = []
        self._sections: list[tuple[list[str], list[str]]] = []  # (path, texts), joined at build
        self._headings: list[str] = []

    @property
    def path(self) -> list[str]:
        return [title for _, title in self._stack]

    def heading(self, level: int, title: str) -> None:
        """Start a new section; an empty heading changes nothing (it has no name to show)."""
        title = clean_inline(title)
        if not title:
            return
        self.flush()
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, title))
        self._headings.append(title)

    def add(self, text: str) -> None:
        """Append one block (paragraph, list, table, code) to the current section."""
        if text and not text.isspace():
            self._blocks.append(text)

    def flush(self) -> None:
        text = clean_text("\n\n".join(self._blocks))
        self._blocks = []
        if not text:
            return
        path = self.path
        if self._sections and self._sections[-1][0] == path:
            # e.g. a PDF section that spans a page break: keep one section, not one per page.
            self._sections[-1][1].append(text)
        else:
            self._sections.append((path, [text]))

    def build(self, title: str, *, what: str, ocr_hint: bool = False) -> ParsedDocument:
        """Finish; a document whose only text is headings keeps them, one with none is an error."""
        self.flush()
        sections = [Section(path=path, text="\n\n".join(texts)) for path, texts in self._sections]
        if not sections and self._headings:
            sections = [Section(path=[], text="\n\n".join(self._headings))]
        if not sections:
            raise no_text_error(what, ocr_hint=ocr_hint)
        return ParsedDocument(title=clean_inline(title), sections=sections)
