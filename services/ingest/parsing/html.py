"""HTML via selectolax (lexbor): visible text only, headings as the section path.

Markup is never kept or executed: script/style/template and similar containers, ``<head>``, and
elements hidden from readers (``hidden``, ``aria-hidden``, inline ``display:none``) are skipped,
because text a human never sees is the easiest place to plant instructions for a model.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from selectolax.lexbor import LexborHTMLParser, LexborNode

from services.common.types import ParsedDocument
from services.ingest.parsing._sections import SectionBuilder, clean_inline

CONTENT_TYPE = "text/html"

_DROP = frozenset(
    {
        "script", "style", "noscript", "template", "iframe", "svg", "head", "object", "embed",
        "canvas", "frameset", "frame", "applet",
    }
)  # fmt: skip
_BLOCK = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "caption", "center", "dd", "details",
        "dialog", "dir", "div", "dl", "dt", "fieldset", "figcaption", "figure", "footer", "form",
        "header", "hgroup", "hr", "html", "legend", "li", "main", "menu", "nav", "ol", "optgroup",
        "option", "p", "pre", "section", "summary", "table", "tbody", "tfoot", "thead", "tr", "ul",
        "textarea",
    }
)  # fmt: skip
_HEADING = {f"h{n}": n for n in range(1, 7)}
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_HTML_SPACE = re.compile(r"[ \t\n\r\f]+")


def _hidden(node: LexborNode) -> bool:
    attrs = node.attributes
    if not attrs:
        return False
    if "hidden" in attrs or (attrs.get("aria-hidden") or "").strip().lower() == "true":
        return True
    return bool(_HIDDEN_STYLE.search(attrs.get("style") or ""))


class _Walker:
    """Iterative (not recursive) walk, so absurdly deep nesting cannot blow the Python stack."""

    def __init__(self, on_block: Callable[[str], None], on_heading: Callable[[int, str], None]) -> None:
        self._on_block = on_block
        self._on_heading = on_heading
        self._buf: list[str] = []
        self._pre = 0
        self._cells: list[int] = []  # cells seen so far in each open <tr>
        self.first_h1 = ""

    def _flush(self) -> None:
        text = "".join(self._buf).strip()
        self._buf = []
        if text:
            self._on_block(text)

    def walk(self, root: LexborNode) -> None:
        stack: list[tuple[LexborNode, bool]] = [(root, False)]
        while stack:
            node, leaving = stack.pop()
            tag = node.tag or ""
            if leaving:
                self._leave(node, tag)
                continue
            if tag == "-text":
                text = node.text_content or ""
                self._buf.append(text if self._pre else _HTML_SPACE.sub(" ", text))
                continue
            if tag.startswith("-") or tag in _DROP or _hidden(node):
                continue  # comments, doctype, invisible or executable content
            if tag in _BLOCK or tag in _HEADING:
                self._flush()
            if tag == "br":
                self._buf.append("\n")
            elif tag == "pre":
                self._pre += 1
            elif tag == "tr":
                self._cells.append(0)
            elif tag in ("td", "th"):
                if self._cells:
                    if self._cells[-1]:
                        self._buf.append(" | ")
                    self._cells[-1] += 1
                else:
                    self._buf.append(" ")
            stack.append((node, True))
            stack.extend((child, False) for child in reversed(list(node.iter(include_text=True))))
        self._flush()

    def _leave(self, node: LexborNode, tag: str) -> None:
        if tag in _HEADING:
            text = clean_inline("".join(self._buf))
            self._buf = []
            if text and _HEADING[tag] == 1 and not self.first_h1:
                self.first_h1 = text
            self._on_heading(_HEADING[tag], text)
            return
        if tag == "pre":
            self._pre -= 1
        elif tag == "tr" and self._cells:
            self._cells.pop()
        if tag in _BLOCK:
            self._flush()


def _tree(html: str) -> LexborHTMLParser:
    return LexborHTMLParser(html)


def parse_html(html: str) -> ParsedDocument:
    """Sections from h1–h6; title from ``<title>``, else the first ``<h1>``."""
    tree = _tree(html)
    title_node = tree.css_first("head > title")
    title = clean_inline(title_node.text(deep=True)) if title_node is not None else ""
    builder = SectionBuilder()
    walker = _Walker(builder.add, builder.heading)
    root = tree.body or tree.root
    if root is not None:
        walker.walk(root)
    return builder.build(title or walker.first_h1, what="HTML document")


def html_fragment_text(html: str) -> str:
    """Visible text of an HTML snippet (e.g. a raw HTML block inside Markdown); headings stay text."""
    blocks: list[str] = []
    walker = _Walker(blocks.append, lambda _level, text: blocks.append(text))
    tree = _tree(html)
    root = tree.body or tree.root
    if root is not None:
        walker.walk(root)
    return "\n\n".join(blocks)
