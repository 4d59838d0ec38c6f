"""Markdown via markdown-it-py (CommonMark + tables): headings give the path, syntax is dropped.

A real CommonMark tokenizer rather than regexes, so emphasis, links, reference links, setext
headings and code fences come out right; raw HTML inside Markdown goes through the HTML parser so a
``<script>`` in a .md file leaks no more than it would in a .html file.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt
from markdown_it.token import Token

from services.common.types import ParsedDocument
from services.ingest.parsing._sections import SectionBuilder, clean_inline
from services.ingest.parsing.html import html_fragment_text

CONTENT_TYPE = "text/markdown"

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(.*?)\n(?:---|\.\.\.)[ \t]*(?:\n|\Z)", re.DOTALL)
# The value: first to last non-space character of its line. Was ``(.+?)\s*$``, quadratic in a run of
# spaces inside the value (the lazy group retried the rest of the run at each of its characters).
_FM_TITLE = re.compile(r"^title\s*:\s*(\S(?:[^\n]*\S)?)", re.MULTILINE | re.IGNORECASE)
_SKIP_INLINE = re.compile(r"^<(script|style|noscript|template|iframe|svg|object|embed)\b[^>]*(?<!/)>$", re.I)
_BR = re.compile(r"^<br\b", re.IGNORECASE)


def _parser() -> MarkdownIt:
    return MarkdownIt("commonmark").enable(["table", "strikethrough"])


def _split_front_matter(text: str) -> tuple[str, str]:
    """YAML front matter is metadata, not prose: drop it, but keep its ``title:``."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return text, ""
    title_match = _FM_TITLE.search(match.group(1))
    title = title_match.group(1).strip("'\"") if title_match else ""
    return text[match.end() :], title


def _inline_text(token: Token) -> str:
    """Plain text of an inline token: link text kept, emphasis markers and images dropped."""
    out: list[str] = []
    skipping: str | None = None
    for child in token.children or []:
        kind = child.type
        if skipping is not None:
            if kind == "html_inline" and child.content.lower().startswith(f"</{skipping}"):
                skipping = None
            continue
        if kind in ("text", "code_inline"):
            out.append(child.content)
        elif kind == "softbreak":
            out.append(" ")
        elif kind == "hardbreak":
            out.append("\n")
        elif kind == "html_inline":
            match = _SKIP_INLINE.match(child.content)
            if match:
                skipping = match.group(1).lower()
            elif _BR.match(child.content):
                out.append("\n")
    return "".join(out)


class _Converter:
    def __init__(self) -> None:
        self.builder = SectionBuilder()
        self.first_h1 = ""
        self._heading: int | None = None
        self._lists: list[int | None] = []  # None: bullet list; int: next number of an ordered list
        self._marker = ""  # list marker still owed to the first paragraph of the current item
        self._list_lines: list[str] = []
        self._row: list[str] | None = None
        self._table_rows: list[str] = []

    def _block(self, text: str) -> None:
        if self._lists:
            self._list_lines.append(self._marker + text)
            self._marker = ""
        else:
            self.builder.add(text)

    def feed(self, tokens: list[Token]) -> None:  # noqa: C901, PLR0912  # one branch per markdown-it token type
        for token in tokens:
            kind = token.type
            if kind == "heading_open":
                self._heading = int(token.tag[1:])
            elif kind == "heading_close":
                self._heading = None
            elif kind == "inline":
                self._inline(token)
            elif kind in ("bullet_list_open", "ordered_list_open"):
                start = token.attrGet("start")
                self._lists.append(None if kind == "bullet_list_open" else int(start or 1))
            elif kind in ("bullet_list_close", "ordered_list_close"):
                self._lists.pop()
                if not self._lists:
                    self.builder.add("\n".join(self._list_lines))
                    self._list_lines = []
            elif kind == "list_item_open" and self._lists:
                number = self._lists[-1]
                if number is None:
                    self._marker = "- "
                else:
                    self._marker = f"{number}. "
                    self._lists[-1] = number + 1
            elif kind == "tr_open":
                self._row = []
            elif kind == "tr_close" and self._row is not None:
                self._table_rows.append(" | ".join(self._row))
                self._row = None
            elif kind == "table_close":
                self._block("\n".join(self._table_rows))
                self._table_rows = []
            elif kind in ("fence", "code_block"):
                self._block(token.content)
            elif kind == "html_block":
                self._block(html_fragment_text(token.content))

    def _inline(self, token: Token) -> None:
        text = _inline_text(token)
        if self._heading is not None and not self._lists:
            if self._heading == 1 and not self.first_h1:
                self.first_h1 = clean_inline(text)
            self.builder.heading(self._heading, text)
        elif self._row is not None:
            self._row.append(" ".join(text.split()))
        else:
            self._block(text)


def parse_markdown(text: str) -> ParsedDocument:
    """Sections from ATX/setext headings; title = first H1, else front matter ``title:``."""
    body, fm_title = _split_front_matter(text.replace("\r\n", "\n"))
    converter = _Converter()
    converter.feed(_parser().parse(body))
    return converter.builder.build(converter.first_h1 or fm_title, what="Markdown document")
