"""Every regex and parser over user text runs in (near-)linear time (issue 36, point 6).

Two kinds of test, both bounding growth, not wall-clock (``tests/timing.py``):

- the shapes an attacker review and the audit found (a run of dots, many "(", a Markdown image with
  many "?", leading HTML comments, runs of spaces in a follow-up question …), each of which took
  quadratic, cubic or exponential time before the fix (seconds to days) and now grows linearly;
- Hypothesis-generated pumps: a prefix, a short unit repeated, a suffix, from characters and
  fragments the patterns react to, over every text function of ingest, fact-check, titles, subjects,
  words and the query-side rules.

``test_regex_equivalence.py`` shows that each rewritten pattern gives the old results.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.subjects import lead_name, subject_words
from services.common.titles import clean_title, mentioned_names, name_key, spelled
from services.common.words import terms, words
from services.factcheck.detectors.claims import extract_claims
from services.factcheck.detectors.framing import detect_framing
from services.factcheck.detectors.injection import detect_injection
from services.factcheck.detectors.query_copy import detect_query_copy
from services.factcheck.detectors.stuffing import detect_stuffing
from services.factcheck.evidence import bounded_text, strip_coverage
from services.ingest.chunk_header import DocTermStats, salient_terms
from services.ingest.parsing import detect_content_type, parse_text
from services.ingest.parsing.markdown import _split_front_matter
from services.ingest.sentences import split_sentence_blocks, split_sentences
from services.orchestrator.conversation.entities import mentions
from services.orchestrator.conversation.rewrite import ellipsis
from services.orchestrator.routing.features import _DEMONSTRATIVES, _ENTITY, cheap_features
from services.retrieval.copy_overlap import replaced_spans
from tests.timing import growth_problem

QUERY = "what is the password policy for the vpn of the company"


def _markdown(text: str) -> object:
    try:
        return parse_text(text, "text/markdown")
    except Exception:  # "no text" on a pump of markup only: an answer, in time
        return None


def _sniff(text: str) -> object:
    try:
        return detect_content_type(text.encode("utf-8", "surrogatepass"))
    except Exception:
        return None


# name -> (function of one text, characters per unit that keeps one call cheap)
TARGETS: dict[str, Callable[[str], object]] = {
    "split_sentences": split_sentences,
    "split_sentence_blocks": split_sentence_blocks,
    "clean_title": clean_title,
    "name_key": name_key,
    "spelled": spelled,
    "mentioned_names": lambda t: mentioned_names(t, limit=500),
    "detect_injection": detect_injection,
    "detect_framing": detect_framing,
    "extract_claims": extract_claims,
    "detect_stuffing": lambda t: detect_stuffing(QUERY, t),
    "detect_query_copy": lambda t: detect_query_copy(QUERY, t),
    "strip_coverage": lambda t: strip_coverage(QUERY, "title", t),
    "bounded_text": bounded_text,
    "words": words,
    "terms": terms,
    "lead_name": lead_name,
    "subject_words": lambda t: subject_words([t]),
    "salient_terms": lambda t: salient_terms(t, 5, doc_stats=DocTermStats.from_text(t)),
    "parse_markdown": _markdown,
    "front_matter": lambda t: _split_front_matter(f"---\n{t}\n---\nbody"),
    "detect_content_type": _sniff,
    "mentions": mentions,
    "ellipsis": ellipsis,
    "cheap_features": lambda t: cheap_features(t, ["an earlier question"]),
    "demonstratives": _DEMONSTRATIVES.search,
    "entities": _ENTITY.findall,
}


def _pump(prefix: str, unit: str, suffix: str) -> Callable[[int], str]:
    return lambda n: prefix + unit * n + suffix


# The shapes that were super-linear, each at sizes where the old code took from 0.1 s to several
# seconds for the larger one (so these fail on it: 8x the input, quadratic grows 64x, cubic 512x; the
# exponential comments double, which squared the old time).
KNOWN: list[tuple[str, Callable[[str], object], Callable[[int], str], int]] = [
    ("dots after a word", split_sentences, _pump("a", ".", ""), 1000),
    ("question marks", split_sentences, _pump("a", "?!", "b"), 500),
    ("many (", clean_title, _pump("", "(", ""), 5000),
    ("spaces then )", clean_title, _pump("a (", " ", "x"), 5000),
    ("image with many ?", detect_injection, _pump("![](http://", "?", ""), 1000),
    ("images with ?", detect_injection, _pump("", "![](http://?", ""), 100),
    ("many ![", detect_injection, _pump("", "![", ""), 1500),
    ("blank lines", detect_injection, _pump("a", "\n", "x"), 1000),
    ("model markup lines", detect_injection, _pump("", "\n \n", "## x"), 500),
    ("short sentences, no reply", detect_injection, _pump("", ". a x", " your"), 2000),
    ("one word repeated, diffed", lambda t: replaced_spans(t, "x " + t), _pump("", "word ", ""), 250),
    ("leading comments", _sniff, _pump("", "<!---->", "x"), 11),
    ("front matter title", lambda t: _split_front_matter(t), _pump("---\ntitle: a", " ", "b\n---\n"), 1000),
    ("follow-up spaces", ellipsis, _pump("and", " ", ""), 150),
    ("what about spaces", ellipsis, _pump("what about x", " ", "x"), 150),
    ("demonstrative spaces", _DEMONSTRATIVES.search, _pump("this", " ", "x"), 500),
    ("entity spaces", _ENTITY.findall, _pump("x A", " ", ""), 500),
]


@pytest.mark.parametrize(("shape", "fn", "make", "n"), KNOWN, ids=[k[0] for k in KNOWN])
def test_the_shapes_that_were_super_linear_grow_linearly(
    shape: str, fn: Callable[[str], object], make: Callable[[int], str], n: int
) -> None:
    problem = growth_problem(fn, make, n, factor=8 if shape != "leading comments" else 2)
    assert problem is None, f"{shape}: {problem}"


# Characters and fragments the patterns and parsers react to: punctuation, brackets, quotes, white
# space of every kind, list markers, Markdown and HTML syntax, and the detectors' own words.
_FRAGMENTS = [
    *".!?…:;,'\"“”‘’()[]{}<>-–—*#|/\\=&_ \t\n\r\x0b\x0c\u00a0\u2028",
    "a",
    "A",
    "1",
    "é",
    "![",
    "](http://",
    "<!--",
    "-->",
    "http://",
    "title:",
    "and ",
    "what about ",
    "the ",
    "of ",
    "In an alternate ",
    "Contrary to ",
    "ignore ",
    "send ",
    "password ",
    "<|im_start|>",
    "## ",
    "system:",
    "1. ",
    "- ",
    "(iv) ",
    "e.g. ",
    "Dr. ",
    "No. ",
    "    ",
    "```",
    "> ",
    "*a*",
    "[a]",
    "&amp;",
]
_PIECE = st.lists(st.sampled_from(_FRAGMENTS), min_size=0, max_size=4).map("".join)
_UNIT = st.lists(st.sampled_from(_FRAGMENTS), min_size=1, max_size=3).map("".join)


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_pumped_inputs_grow_linearly(name: str) -> None:
    fn = TARGETS[name]

    @settings(
        max_examples=30,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(prefix=_PIECE, unit=_UNIT, suffix=_PIECE)
    def pumped(prefix: str, unit: str, suffix: str) -> None:
        n = max(20, 2000 // len(unit))
        problem = growth_problem(fn, _pump(prefix, unit, suffix), n)
        assert problem is None, problem

    pumped()
