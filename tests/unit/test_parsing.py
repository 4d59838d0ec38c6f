"""Document parsers: every format, section paths, markup stripping and every bad-input error."""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import docx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pypdf import PdfReader, PdfWriter
from reportlab.lib.pagesizes import A4
from reportlab.lib.styles import getSampleStyleSheet
from reportlab.pdfgen import canvas
from reportlab.platypus import PageBreak, Paragraph, SimpleDocTemplate

from services.common.errors import ErrorCode, RampartError
from services.common.types import Acl, Document, ParsedDocument
from services.ingest.parsing import SUPPORTED_TYPES, detect_content_type, parse_bytes, parse_text

SAMPLES = Path(__file__).resolve().parents[2] / "samples"
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"


def paths(doc: ParsedDocument) -> list[list[str]]:
    return [s.path for s in doc.sections]


def section(doc: ParsedDocument, path: list[str]) -> str:
    for s in doc.sections:
        if s.path == path:
            return s.text
    raise AssertionError(f"no section {path}; have {paths(doc)}")


def raises(code: ErrorCode, fn, *args, **kwargs) -> RampartError:  # type: ignore[no-untyped-def]
    with pytest.raises(RampartError) as info:
        fn(*args, **kwargs)
    assert info.value.code == code, info.value
    return info.value


# --- fixtures: binary documents built in-test -------------------------------------------------


def make_pdf(
    blocks: list[tuple[str, str]], *, title: str = "", outline: bool = True, path: Path | None = None
) -> bytes:
    """blocks: ("h1"|"h2", text) headings (bookmarked when outline=True), ("p", text), ("break", "")."""
    styles = getSampleStyleSheet()

    class Heading(Paragraph):  # type: ignore[misc]
        def __init__(self, text: str, level: int, key: str) -> None:
            super().__init__(text, styles["Heading1" if level == 0 else "Heading2"])
            self.level, self.key = level, key

        def draw(self) -> None:
            super().draw()
            if outline:
                self.canv.bookmarkPage(self.key)
                self.canv.addOutlineEntry(self.getPlainText(), self.key, level=self.level, closed=False)

    story = []
    for n, (kind, text) in enumerate(blocks):
        if kind in ("h1", "h2"):
            story.append(Heading(text, 0 if kind == "h1" else 1, f"k{n}"))
        elif kind == "p":
            story.append(Paragraph(text, styles["BodyText"]))
        else:
            story.append(PageBreak())
    buf = io.BytesIO()
    SimpleDocTemplate(buf, pagesize=A4, title=title).build(story)
    data = buf.getvalue()
    if path is not None:
        path.write_bytes(data)
    return data


def make_docx(tmp_path: Path, *, core_title: str = "", build=None) -> bytes:  # type: ignore[no-untyped-def]
    document = docx.Document()
    document.core_properties.title = core_title
    if build is not None:
        build(document)
    path = tmp_path / "doc.docx"
    document.save(str(path))
    return path.read_bytes()


def make_zip(entries: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries.items():
            zf.writestr(name, data)
    return buf.getvalue()


# --- plain text --------------------------------------------------------------------------------


def test_plain_text_is_one_untitled_section() -> None:
    doc = parse_text("First paragraph\nstill first.\n\n\n\nSecond   paragraph.\t\tTabbed.", "text/plain")
    assert doc.title == ""
    assert paths(doc) == [[]]
    assert doc.sections[0].text == "First paragraph\nstill first.\n\nSecond paragraph. Tabbed."


def test_plain_bytes_by_extension() -> None:
    doc = parse_bytes(b"hello world\r\nsecond line\r\n", filename="notes.TXT")
    assert doc.text == "hello world\nsecond line"


def test_text_is_cleaned_nfc_no_controls_no_nul() -> None:
    # "e" + combining acute -> NFC "é"; NUL, bell, escape and DEL vanish; NBSP and CR become plain.
    raw = "Cafe\u0301\x00 au\x07 lait\x1b\x7f\u00a0now\r\nnext\u200bline\ufeff"
    doc = parse_text(raw, "text/plain")
    assert doc.text == "Café au lait now\nnextline"
    assert all(ch in "\n\t" or ch >= " " for ch in doc.text)


def test_lone_surrogates_are_dropped() -> None:
    assert parse_text("ok \ud800 fine", "text/plain").text == "ok fine"


def test_declared_charset_and_boms() -> None:
    assert (
        parse_bytes("Grüße".encode("latin-1"), content_type="text/plain; charset=ISO-8859-1").text == "Grüße"
    )
    assert parse_bytes(b"\xef\xbb\xbfbom text", filename="a.txt").text == "bom text"
    assert parse_bytes("utf16 ✓".encode("utf-16"), filename="a.txt").text == "utf16 ✓"


def test_html_meta_charset_is_honoured() -> None:
    html = (
        '<html><head><meta charset="windows-1252"><title>T</title></head><body><p>caf\xe9</p></body></html>'
    )
    assert parse_bytes(html.encode("cp1252"), filename="x.html").text == "café"


# --- markdown ----------------------------------------------------------------------------------

MARKDOWN = """\
Preamble before any heading.

# Benefits

Intro with *emphasis*, __strong__, `inline code` and a [link text](https://example.com/x).

## Parental leave

Primary caregivers get **20 weeks**.

- item one
- item _two_

1. first
2. second

```python
def fence():
    return "code kept"
```

### Adoption

Same rules &amp; the same pay.

## Sick leave

| Days | Note |
| --- | --- |
| 5 | doctor's note after |

# Other

<div><script>alert("md-script-leak")</script><p>raw html <b>block</b></p></div>

Inline <script>bad("inline-leak")</script> survives.
"""


def test_markdown_sections_follow_heading_hierarchy() -> None:
    doc = parse_text(MARKDOWN, "text/markdown")
    assert doc.title == "Benefits"
    assert paths(doc) == [
        [],
        ["Benefits"],
        ["Benefits", "Parental leave"],
        ["Benefits", "Parental leave", "Adoption"],
        ["Benefits", "Sick leave"],
        ["Other"],
    ]
    assert section(doc, []) == "Preamble before any heading."


def test_markdown_syntax_is_stripped() -> None:
    doc = parse_text(MARKDOWN, "text/markdown")
    intro = section(doc, ["Benefits"])
    assert intro == "Intro with emphasis, strong, inline code and a link text."
    leave = section(doc, ["Benefits", "Parental leave"])
    assert "Primary caregivers get 20 weeks." in leave
    assert "- item one\n- item two" in leave
    assert "1. first\n2. second" in leave
    assert 'return "code kept"' in leave and "```" not in leave
    assert section(doc, ["Benefits", "Parental leave", "Adoption"]) == "Same rules & the same pay."
    assert "Days | Note\n5 | doctor's note after" in section(doc, ["Benefits", "Sick leave"])
    for marker in ("*", "__", "](", "#", "<b>", "&amp;"):
        assert marker not in doc.text


def test_markdown_raw_html_drops_scripts() -> None:
    other = section(parse_text(MARKDOWN, "text/markdown"), ["Other"])
    assert "raw html block" in other
    assert "Inline survives." in " ".join(other.split())
    assert "leak" not in other


def test_markdown_title_falls_back_to_front_matter_and_setext_headings_count() -> None:
    doc = parse_text(
        "---\ntitle: 'From front matter'\nowner: hr\n---\nBody\n\nSub\n---\n\nmore\n", "text/markdown"
    )
    assert doc.title == "From front matter"
    assert paths(doc) == [[], ["Sub"]]
    assert "owner" not in doc.text


def test_markdown_only_headings_keeps_them_as_text() -> None:
    doc = parse_text("# Just a title\n", "text/markdown")
    assert doc.title == "Just a title"
    assert doc.sections[0].text == "Just a title"


def test_markdown_bytes_by_extension_and_alias() -> None:
    assert paths(parse_bytes(b"# A\n\ntext", filename="x.markdown")) == [["A"]]
    assert paths(parse_bytes(b"# A\n\ntext", content_type="text/x-markdown")) == [["A"]]


# --- HTML --------------------------------------------------------------------------------------

HTML = """<!DOCTYPE html>
<html><head><title>Policy &amp; Rules</title>
<style>.x { content: "style-leak" }</style>
<script>var s = "head-script-leak";</script>
<meta name="description" content="meta-leak">
</head>
<body>
<p>Before&nbsp;headings &lt;b&gt; &eacute;</p>
<h1>Security <em>policy</em></h1>
<p>Use MFA.<br>Always.</p><p>Second paragraph.</p>
<script>document.write("body-script-leak")</script>
<noscript>noscript-leak</noscript>
<template><p>template-leak</p></template>
<iframe src="https://example.com">iframe-leak</iframe>
<svg><text>svg-leak</text></svg>
<div hidden>hidden-leak</div>
<span style="DISPLAY : none">display-none-leak</span>
<p aria-hidden="true">aria-leak</p>
<!-- comment-leak -->
<h2>Devices</h2>
<ul><li>Encrypt disks</li><li>Lock screens</li></ul>
<table><tr><th>Class</th><th>Handling</th></tr><tr><td>Secret</td><td>Named only</td></tr></table>
<h3>Phones</h3><div>MDM <span>required</span></div>
<h2>Reporting</h2><pre>line one
    line two</pre>
</body></html>"""


def test_html_sections_title_and_text() -> None:
    doc = parse_bytes(HTML.encode(), filename="policy.htm")
    assert doc.title == "Policy & Rules"
    assert paths(doc) == [
        [],
        ["Security policy"],
        ["Security policy", "Devices"],
        ["Security policy", "Devices", "Phones"],
        ["Security policy", "Reporting"],
    ]
    assert section(doc, []) == "Before headings <b> é"
    assert section(doc, ["Security policy"]) == "Use MFA.\nAlways.\n\nSecond paragraph."
    devices = section(doc, ["Security policy", "Devices"])
    assert "Encrypt disks\n\nLock screens" in devices
    assert "Class | Handling" in devices and "Secret | Named only" in devices
    assert section(doc, ["Security policy", "Devices", "Phones"]) == "MDM required"
    assert section(doc, ["Security policy", "Reporting"]) == "line one\nline two"


def test_html_never_keeps_scripts_styles_or_hidden_text() -> None:
    doc = parse_bytes(HTML.encode(), content_type="text/html; charset=utf-8")
    assert "leak" not in doc.text.lower()
    assert "<" not in doc.text.replace("<b>", "")  # the only "<" is the decoded &lt;b&gt; entity


def test_html_title_falls_back_to_first_h1() -> None:
    doc = parse_text("<h2>Intro</h2><p>x</p><h1>Main</h1><p>y</p>", "text/html")
    assert doc.title == "Main"
    assert paths(doc) == [["Intro"], ["Main"]]


def test_html_deep_nesting_does_not_crash() -> None:
    html = "<div>" * 5000 + "deep text" + "</div>" * 5000
    assert parse_text(html, "text/html").text == "deep text"


def test_html_with_only_script_has_no_text() -> None:
    err = raises(
        ErrorCode.INVALID_ARGUMENT, parse_text, "<script>x()</script><style>a{}</style>", "text/html"
    )
    assert "no text could be extracted" in err.message


# --- PDF ---------------------------------------------------------------------------------------


def test_pdf_sections_from_outline(tmp_path: Path) -> None:
    data = make_pdf(
        [
            ("p", "Preamble paragraph."),
            ("h1", "Overview"),
            ("p", "Overview body."),
            ("h2", "Scope"),
            ("p", "Scope body."),
            ("break", ""),
            ("p", "Scope continues on page two."),
            ("h1", "Appendix"),
            ("p", "Appendix body."),
        ],
        title="Handbook PDF",
        path=tmp_path / "h.pdf",
    )
    doc = parse_bytes(data, filename="h.pdf")
    assert doc.title == "Handbook PDF"
    assert paths(doc) == [[], ["Overview"], ["Overview", "Scope"], ["Appendix"]]
    assert section(doc, []) == "Preamble paragraph."
    assert section(doc, ["Overview"]) == "Overview body."
    assert section(doc, ["Overview", "Scope"]) == "Scope body.\n\nScope continues on page two."
    assert section(doc, ["Appendix"]) == "Appendix body."


def test_pdf_without_outline_has_page_sections() -> None:
    data = make_pdf([("p", "first page"), ("break", ""), ("break", ""), ("p", "third page")], outline=False)
    doc = parse_bytes(data, content_type=PDF)
    assert paths(doc) == [["Page 1"], ["Page 3"]]  # the empty page 2 is dropped
    assert doc.text == "first page\n\nthird page"


def test_pdf_page_cap_is_configurable() -> None:
    data = make_pdf([("p", "one"), ("break", ""), ("p", "two")], outline=False)
    err = raises(ErrorCode.PAYLOAD_TOO_LARGE, parse_bytes, data, filename="x.pdf", max_pdf_pages=1)
    assert "2 pages" in err.message and "limit of 1" in err.message
    assert len(parse_bytes(data, filename="x.pdf", max_pdf_pages=2).sections) == 2


def _encrypt(data: bytes, *, user: str, owner: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user, owner_password=owner, algorithm="RC4-128")
    buf = io.BytesIO()
    writer.write(buf)
    return buf.getvalue()


def test_pdf_encrypted_with_user_password_is_refused() -> None:
    data = _encrypt(make_pdf([("p", "secret text")], outline=False), user="hunter2", owner="owner")
    err = raises(ErrorCode.INVALID_ARGUMENT, parse_bytes, data, filename="locked.pdf")
    assert "encrypted" in err.message and "password" in err.message


def test_pdf_with_owner_password_only_still_parses() -> None:
    data = _encrypt(make_pdf([("p", "readable text")], outline=False), user="", owner="owner")
    assert parse_bytes(data, filename="perm.pdf").text == "readable text"


def test_pdf_without_text_layer_mentions_ocr() -> None:
    buf = io.BytesIO()
    c = canvas.Canvas(buf)
    c.rect(50, 50, 200, 200, fill=1)  # a "scan": drawing only, no text
    c.showPage()
    c.save()
    err = raises(ErrorCode.INVALID_ARGUMENT, parse_bytes, buf.getvalue(), filename="scan.pdf")
    assert "no text could be extracted" in err.message
    assert "OCR is not supported" in err.message


@pytest.mark.parametrize(
    "data",
    [b"%PDF-1.7\nthis is not really a pdf", b"%PDF-", b"not a pdf at all, just text"],
    ids=["garbage-body", "magic-only", "text-declared-as-pdf"],
)
def test_corrupt_pdf_is_invalid_argument_with_reason(data: bytes) -> None:
    err = raises(ErrorCode.INVALID_ARGUMENT, parse_bytes, data, content_type=PDF)
    assert "PDF" in err.message
    assert "(" in err.message  # carries pypdf's reason


def test_truncated_pdf_never_raises_a_raw_exception() -> None:
    data = make_pdf([("h1", "A"), ("p", "body text")])
    for cut in (len(data) // 4, len(data) // 2, len(data) - 40):
        try:
            parse_bytes(data[:cut], filename="cut.pdf")
        except RampartError as err:
            assert err.code == ErrorCode.INVALID_ARGUMENT


# --- DOCX --------------------------------------------------------------------------------------


def _handbook(document: docx.document.Document) -> None:
    document.add_paragraph("Loose intro.")
    document.add_paragraph("Employee Handbook", style="Title")
    document.add_paragraph("Under the title.")
    document.add_heading("Leave", level=1)
    document.add_paragraph("Leave intro.")
    document.add_heading("Parental leave", level=2)
    document.add_paragraph("Twenty weeks.")
    table = document.add_table(rows=2, cols=3)
    for r, row in enumerate([["Role", "Weeks", "Paid"], ["Primary", "20", "yes"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    merged = document.add_table(rows=1, cols=2)
    merged.cell(0, 0).merge(merged.cell(0, 1)).text = "Merged cell once"
    document.add_heading("Expenses", level=1)
    document.add_paragraph("Receipts required.")


def test_docx_sections_tables_and_core_title(tmp_path: Path) -> None:
    doc = parse_bytes(make_docx(tmp_path, core_title="Core Title", build=_handbook), filename="h.docx")
    assert doc.title == "Core Title"
    assert paths(doc) == [
        [],
        ["Employee Handbook"],
        ["Employee Handbook", "Leave"],
        ["Employee Handbook", "Leave", "Parental leave"],
        ["Employee Handbook", "Expenses"],
    ]
    assert section(doc, []) == "Loose intro."
    parental = section(doc, ["Employee Handbook", "Leave", "Parental leave"])
    assert "Twenty weeks." in parental
    assert "Role | Weeks | Paid\nPrimary | 20 | yes" in parental
    assert parental.count("Merged cell once") == 1


def test_docx_title_from_title_style_when_no_core_title(tmp_path: Path) -> None:
    doc = parse_bytes(make_docx(tmp_path, build=_handbook), content_type=DOCX)
    assert doc.title == "Employee Handbook"


def test_docx_nested_table_text(tmp_path: Path) -> None:
    def build(document: docx.document.Document) -> None:
        outer = document.add_table(rows=1, cols=2)
        outer.cell(0, 0).text = "outer"
        outer.cell(0, 1).add_table(rows=1, cols=1).cell(0, 0).text = "inner"

    text = parse_bytes(make_docx(tmp_path, build=build), filename="t.docx").text
    assert "outer" in text and "inner" in text


def test_docx_without_text_is_invalid(tmp_path: Path) -> None:
    data = make_docx(tmp_path, build=lambda d: d.add_paragraph("   "))
    err = raises(ErrorCode.INVALID_ARGUMENT, parse_bytes, data, filename="blank.docx")
    assert "no text could be extracted" in err.message


def test_docx_zip_bomb_is_refused() -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("word/document.xml", b"<w:document/>")
        with zf.open("word/media/bomb.bin", "w") as out:
            chunk = b"\0" * (1 << 20)
            for _ in range(101):
                out.write(chunk)
    data = buf.getvalue()
    assert len(data) < 1_000_000
    err = raises(ErrorCode.PAYLOAD_TOO_LARGE, parse_bytes, data, filename="bomb.docx")
    assert "zip bomb" in err.message
    raises(ErrorCode.PAYLOAD_TOO_LARGE, parse_bytes, make_zip({"word/document.xml": b"x" * 2000}),
           filename="small.docx", max_docx_uncompressed=1000)  # fmt: skip


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"PK\x03\x04 truncated zip", "not a readable DOCX"),
        (b"definitely not a zip", "not a readable DOCX"),
        (make_zip({"hello.txt": b"hi"}), "no word/document.xml"),
        (make_zip({"word/document.xml": b"<not-xml"}), "could not be opened"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 64, "legacy Word .doc"),
    ],
    ids=["truncated", "not-zip", "zip-not-word", "bad-xml", "ole"],
)
def test_corrupt_docx_is_invalid_argument(data: bytes, needle: str) -> None:
    err = raises(ErrorCode.INVALID_ARGUMENT, parse_bytes, data, content_type=DOCX)
    assert needle in err.message


# --- detection ---------------------------------------------------------------------------------


def test_detection_order_content_type_then_extension_then_sniffing(tmp_path: Path) -> None:
    pdf = make_pdf([("p", "x")], outline=False)
    docx_bytes = make_docx(tmp_path, build=lambda d: d.add_paragraph("x"))
    assert detect_content_type(b"# hi", filename="a.txt", content_type="text/markdown") == "text/markdown"
    assert detect_content_type(b"# hi", filename="a.md") == "text/markdown"
    assert detect_content_type(b"# hi", filename="a.md", content_type="application/octet-stream") == (
        "text/markdown"
    )
    assert detect_content_type(pdf) == PDF
    assert detect_content_type(docx_bytes, filename="upload") == DOCX
    assert detect_content_type(b"  <!DOCTYPE html><p>x") == "text/html"
    assert detect_content_type(b"<!-- c -->\n<html><body>x") == "text/html"
    assert detect_content_type(b"just words") == "text/plain"
    assert detect_content_type(b"x", content_type="Application/XHTML+XML; charset=utf-8") == "text/html"
    assert parse_bytes(pdf, filename="misnamed.bin").text == "x"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"content_type": "image/png"},
        {"filename": "sheet.xlsx"},
        {"filename": "legacy.doc"},
        {},
    ],
    ids=["declared", "extension", "doc-extension", "unrecognised-bytes"],
)
def test_unknown_type_is_unsupported_media_type(kwargs: dict[str, str]) -> None:
    err = raises(ErrorCode.UNSUPPORTED_MEDIA_TYPE, parse_bytes, b"\x89PNG\r\n\x1a\n\xff\xfe", **kwargs)
    for ctype in SUPPORTED_TYPES:
        assert ctype in err.message
    assert err.details["supported"] == list(SUPPORTED_TYPES)


def test_parse_text_rejects_binary_and_unknown_types() -> None:
    raises(ErrorCode.UNSUPPORTED_MEDIA_TYPE, parse_text, "x", PDF)
    raises(ErrorCode.UNSUPPORTED_MEDIA_TYPE, parse_text, "x", DOCX)
    err = raises(ErrorCode.UNSUPPORTED_MEDIA_TYPE, parse_text, "x", "application/json")
    assert "application/json" in err.message and "text/markdown" in err.message


# --- bad input ---------------------------------------------------------------------------------


def test_empty_input_is_invalid_argument() -> None:
    err = raises(ErrorCode.INVALID_ARGUMENT, parse_bytes, b"", filename="empty.txt")
    assert "empty" in err.message and "empty.txt" in err.message
    raises(ErrorCode.INVALID_ARGUMENT, parse_bytes, b"", content_type=PDF)
    raises(ErrorCode.INVALID_ARGUMENT, parse_text, "", "text/plain")
    raises(ErrorCode.INVALID_ARGUMENT, parse_text, " \n\t ", "text/markdown")
    raises(ErrorCode.INVALID_ARGUMENT, parse_bytes, b" \r\n ", filename="blank.md")


def test_non_utf8_bytes_name_the_offset() -> None:
    err = raises(ErrorCode.INVALID_ARGUMENT, parse_bytes, b"abc\xff\xfedef", filename="bad.txt")
    assert "not valid UTF-8" in err.message
    assert "byte offset 3" in err.message and "0xff" in err.message
    assert err.details["offset"] == 3


def test_binary_bytes_for_text_formats_are_refused() -> None:
    err = raises(
        ErrorCode.INVALID_ARGUMENT, parse_bytes, b"\x00\x01\x02\x00\x00bin\x00", content_type="text/plain"
    )
    assert "binary" in err.message and "byte offset 0" in err.message


def test_pdf_sent_as_text_gets_a_hint() -> None:
    data = make_pdf([("p", "x")], outline=False)
    err = raises(ErrorCode.INVALID_ARGUMENT, parse_bytes, data, content_type="text/plain")
    assert PDF in err.message


def test_only_control_characters_is_no_text() -> None:
    err = raises(ErrorCode.INVALID_ARGUMENT, parse_text, "\x01\x02\x1b\u200b", "text/plain")
    assert "no text could be extracted" in err.message


def test_unknown_declared_charset() -> None:
    err = raises(ErrorCode.INVALID_ARGUMENT, parse_bytes, b"x", content_type="text/plain; charset=klingon")
    assert "klingon" in err.message


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.binary(min_size=0, max_size=400),
    ctype=st.sampled_from([None, "text/plain", "text/markdown", "text/html", PDF, DOCX, "image/gif"]),
)
def test_fuzz_parse_bytes_only_raises_rampart_errors(data: bytes, ctype: str | None) -> None:
    for prefix in (b"", b"%PDF-1.4\n", b"PK\x03\x04"):
        try:
            doc = parse_bytes(prefix + data, content_type=ctype)
        except RampartError:
            continue
        assert doc.sections and all(s.text for s in doc.sections)


@settings(max_examples=150, deadline=None)
@given(text=st.text(max_size=300), ctype=st.sampled_from(["text/plain", "text/markdown", "text/html"]))
def test_fuzz_parse_text_only_raises_rampart_errors(text: str, ctype: str) -> None:
    try:
        doc = parse_text(text, ctype)
    except RampartError as err:
        assert err.code == ErrorCode.INVALID_ARGUMENT
        return
    assert doc.sections and all(s.text.strip() for s in doc.sections)
    assert "\x00" not in doc.text


# --- the shipped sample corpus -----------------------------------------------------------------

SAMPLE_FILES = sorted(p for p in SAMPLES.glob("*/*") if p.is_file() and not p.name.endswith(".meta.json"))


def test_sample_corpus_shape() -> None:
    by_ext = {p.suffix for p in SAMPLE_FILES}
    assert {".md", ".txt", ".html", ".pdf", ".docx"} <= by_ext
    assert 20 <= len(SAMPLE_FILES) <= 30
    assert {p.parent.name for p in SAMPLE_FILES} == {"acme", "globex"}


@pytest.mark.parametrize("path", SAMPLE_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_sample_parses(path: Path) -> None:
    assert path.stat().st_size < 60_000
    doc = parse_bytes(path.read_bytes(), filename=path.name)
    assert doc.sections and all(s.text for s in doc.sections)
    assert 150 <= len(doc.text.split()) <= 900
    assert not re.search(r"LEAK|analyticsKey|AK-3391|font-family", doc.text)
    # What ingest will build from it must validate.
    sidecar = path.with_name(path.name + ".meta.json")
    meta = json.loads(sidecar.read_text()) if sidecar.exists() else {}
    Document(
        id=f"{path.parent.name}/{path.name}",
        tenant=path.parent.name,
        acl=Acl(**meta.get("acl", {"groups": ["*"]})),
        title=meta.get("title", doc.title),
        text=doc.text,
        metadata=meta.get("metadata", {}),
    )
    assert path.name in (SAMPLES / "README.md").read_text()


def test_sample_sidecars_belong_to_documents() -> None:
    for sidecar in SAMPLES.glob("*/*.meta.json"):
        assert sidecar.with_name(sidecar.name.removesuffix(".meta.json")).exists(), sidecar
        assert set(json.loads(sidecar.read_text())) <= {"title", "acl", "metadata"}


def test_sample_binary_structure_survives() -> None:
    pdf = parse_bytes((SAMPLES / "acme" / "r7-technical-specification.pdf").read_bytes(), filename="x.pdf")
    assert ["Mechanical specifications"] in paths(pdf)
    assert "7 kg" in section(pdf, ["Mechanical specifications"])
    memo = parse_bytes((SAMPLES / "acme" / "project-falcon-memo.docx").read_bytes(), filename="m.docx")
    assert memo.title.startswith("Project Falcon")
    assert any(p[-1:] == ["Valuation"] for p in paths(memo))
    html = parse_bytes((SAMPLES / "acme" / "security-policy.html").read_bytes(), filename="s.html")
    assert "There is no shared VPN password" in " ".join(html.text.split())


def test_planted_injection_fixture_is_intact() -> None:
    path = SAMPLES / "acme" / "it-wiki-vpn-setup.md"
    assert "Ignore previous instructions" in parse_bytes(path.read_bytes(), filename=path.name).text
    meta = json.loads(path.with_name(path.name + ".meta.json").read_text())
    assert meta["metadata"]["fixture"] == "prompt-injection"
