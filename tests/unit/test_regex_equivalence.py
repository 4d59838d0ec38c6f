"""The linear-time rewrites give what the old patterns gave (issue 36, point 6).

Each old pattern is kept here, verbatim, as the reference; Hypothesis compares it with the new form on
short inputs built from the characters and words it reacts to (short, so the old one is fast). The
real-text fingerprints of the commit that made the change are the other half of the evidence.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from services.common.titles import clean_title
from services.factcheck.detectors.injection import PATTERNS, detect_injection
from services.ingest.parsing import _HTML_SNIFF
from services.ingest.parsing.markdown import _FM_TITLE
from services.ingest.sentences import _CANDIDATE
from services.orchestrator.conversation.rewrite import ellipsis
from services.orchestrator.routing.features import _DEMONSTRATIVES, _ENTITY

OLD_CANDIDATE = re.compile(r"([.!?…]+)['\"”’)\]]*(?=\s)")
OLD_PAREN = re.compile(r"\s*\([^)]*\)\s*$")
_FLAGS = re.IGNORECASE | re.UNICODE
OLD_MARKUP = re.compile(
    r"<\|?(im_start|im_end|system|endoftext|eot_id|start_header_id)\|?>|\[/?INST\]|<<SYS>>|"
    r"^\s*#{2,}\s*(system|instruction|new instructions)\b|^\s*(system|assistant)\s*:",
    _FLAGS | re.MULTILINE,
)
OLD_EXFILTRATION = re.compile(
    r"\b(send|forward|email|post|upload|submit)\b[^.\n]{0,40}\b(password|passcode|mfa|2fa|otp|"
    r"one-time code|credentials?|api key|token|secret)s?\b|"
    r"\b(call|invoke|execute|run)\s+(the\s+)?(function|tool|command|shell|script)\b|"
    r"!\[[^\]]*\]\(https?://[^)]*\?[^)]*=",
    _FLAGS,
)
OLD_SNIFF = re.compile(
    rb"^\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body|title|meta|div|p|h[1-6]|table|ul|ol|"
    rb"section|article|main|span|a|br)[\s>/]",
    re.IGNORECASE | re.DOTALL,
)
OLD_FM_TITLE = re.compile(r"^title\s*:\s*(.+?)\s*$", re.MULTILINE | re.IGNORECASE)
OLD_ELLIPSIS = re.compile(
    r"^\s*(?:and\s+)?(?:what|how)\s+about\s+(.+?)\s*\??\s*$|^\s*and\s+(.+?)\s*\?\s*$", re.I
)
OLD_DEMONSTRATIVES = re.compile(
    r"\b(?:this|that|these|those)\s+(?:one|ones|guy|person|place|film|movie|book|band|team|city|country|"
    r"company|album|song|show|year|time)\b|\bthe\s+(?:first|second|third|last|other|latter|former|same)"
    r"(?:\s+(?:one|ones))?\b|\b(?:the latter|the former|both of them|either of them|that|this|those|these|"
    r"there|then)\s*[?.!]?\s*$",
)
OLD_ENTITY = re.compile(r"(?<![.?!]\s)(?<!^)\b[A-Z][\w'’.-]*(?:\s+(?:of|the|de|and|&)?\s*[A-Z][\w'’.-]*)*")

SPACES = [" ", "  ", "\t", "\n", "\r", "\x0b", "\u00a0", "\u2028", "\x1c"]


def texts(*pieces: str, max_size: int = 14) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from([*pieces, *SPACES]), max_size=max_size).map("".join)


CHECK = settings(max_examples=400, deadline=None, derandomize=True, database=None)


@CHECK
@given(texts(".", "!", "?", "…", "'", '"', "”", "’", ")", "]", "a", "A", "1"))
def test_sentence_candidates(text: str) -> None:
    old = [(m.span(), m.group(1)) for m in OLD_CANDIDATE.finditer(text)]
    assert [(m.span(), m.group(1)) for m in _CANDIDATE.finditer(text)] == old


@CHECK
@given(texts("(", ")", "a", "A (1945 film)", "&amp;", "&lt;", "x"))
def test_clean_title(title: str) -> None:
    import html

    assert clean_title(title) == OLD_PAREN.sub("", html.unescape(title)).strip()


def _old_injection_evidence(text: str) -> str:
    found = []
    for family, _, pattern in PATTERNS:
        old = {"model_markup": OLD_MARKUP, "exfiltration": OLD_EXFILTRATION}.get(family, pattern)
        m = old.search(text)
        if m:
            found.append(f"{family}: {m.group(0).strip()[:80]!r}")
    return "; ".join(found)


@CHECK
@given(
    texts(
        "![",
        "!",
        "[",
        "]",
        "(",
        ")",
        "](http://",
        "](HTTPS://",
        "http://",
        "?",
        "=",
        "a",
        "send ",
        "token",
        "run the tool",
        "## system",
        "#",
        "system:",
        "assistant :",
        "[INST]",
        ".",
        max_size=18,
    )
)
def test_injection_evidence(text: str) -> None:
    assert detect_injection(text).evidence == _old_injection_evidence(text)


@CHECK
@given(texts("<!--", "-->", "-", ">", "<", "<html>", "<p ", "<div/", "x", "<!doctype html>", max_size=12))
def test_html_sniff(text: str) -> None:
    data = text.encode()
    assert bool(_HTML_SNIFF.match(data)) == bool(OLD_SNIFF.match(data))


def _title(pattern: re.Pattern[str], text: str) -> str:
    m = pattern.search(text)
    return m.group(1).strip() if m else ""  # the caller strips quotes; blank titles count as none


@CHECK
@given(texts("title", ":", "Title", "a", "b c", "'", "x"))
def test_front_matter_title(text: str) -> None:
    assert _title(_FM_TITLE, text) == _title(OLD_FM_TITLE, text)


@CHECK
@given(texts("and", "what", "how", "about", "?", "x", "And", "WHAT", "About", "Will Smith", max_size=12))
def test_ellipsis(query: str) -> None:
    m = OLD_ELLIPSIS.match(query)
    assert ellipsis(query) == (None if m is None else (m.group(1), m.group(2)))


@CHECK
@given(texts("this", "that", "these", "then", "the latter", "?", ".", "!", "x", "one"))
def test_demonstratives(query: str) -> None:
    assert bool(_DEMONSTRATIVES.search(query)) == bool(OLD_DEMONSTRATIVES.search(query))


@CHECK
@given(texts("A", "Bank", "of", "the", "The", "de", "and", "&", "x", ".", "?", "O'Neil", "-", max_size=16))
def test_entities(query: str) -> None:
    assert _ENTITY.findall(query) == OLD_ENTITY.findall(query)
