"""Chunking: sentence splitting, chunk headers, topic (TextTiling) and fixed-size chunkers."""

from __future__ import annotations

import itertools
import re
import zlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.common.types import Chunk, ParsedDocument, Section
from services.ingest.chunk_header import DocTermStats, build_header, salient_terms
from services.ingest.chunker import build_chunker
from services.ingest.config import ChunkingSettings
from services.ingest.fixed_chunker import FixedChunker
from services.ingest.sentences import split_sentence_blocks, split_sentences
from services.ingest.topic_chunker import TopicChunker
from tests.contracts.chunker import MAKE_CHUNKER, ChunkerContract


class HashingEmbedder:
    """Test double for the chunker's *input* (sentence vectors), not a stand-in component under test.

    Segmentation is a pure function of the sentence vectors; a deterministic bag-of-words hashed into
    64 dimensions gives vectors whose similarity tracks shared vocabulary, which is all these tests
    need. The real ONNX model is exercised by the integration tests.
    """

    dim = 64
    model_id = "test-hashing-bow-64"

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.calls.append(len(texts))
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"[a-z]{4,}", text.lower()):  # skip short function words
                out[i, zlib.crc32(word.encode()) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.maximum(norms, 1e-12)


# Each topic repeats its own vocabulary (lexical cohesion, which TextTiling relies on).
COOKING = [
    "Preheat the oven, then butter the cake tin and dust the cake tin with flour.",
    "Whisk the flour, sugar and butter into a smooth cake batter.",
    "Fold chopped chocolate into the cake batter with the flour.",
    "Pour the chocolate batter into the cake tin and put the tin in the oven.",
    "Bake the cake in the oven until the chocolate cake is golden.",
    "Cool the baked cake, then dust the cake with sugar.",
    "Serve the chocolate cake with butter cream and sugar.",
    "Leftover cake keeps well, wrapped in foil, away from the oven.",
]
ASTRONOMY = [
    "Telescopes collect starlight from distant galaxies and their stars.",
    "Astronomers point telescopes at galaxies to measure the redshift of stars.",
    "Planets orbit stars, and telescopes track each planet orbit.",
    "Jupiter is a giant planet whose orbit shields inner planets from comets.",
    "Comets orbit stars too, and telescopes see comets grow bright tails.",
    "Nebulae in galaxies are clouds where new stars and planets form.",
    "Massive stars collapse into neutron stars, which telescopes observe.",
    "Observatories place telescopes on mountains to watch stars and galaxies.",
]


def words(text: str) -> list[str]:
    return text.split()


def doc(*sections: tuple[list[str], str], title: str = "") -> ParsedDocument:
    return ParsedDocument(title=title, sections=[Section(path=p, text=t) for p, t in sections])


def check_invariants(chunks: list[Chunk], parsed: ParsedDocument, max_words: int, doc_id: str) -> None:
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert [c.chunk_id for c in chunks] == [f"{doc_id}#{i}" for i in range(len(chunks))]
    for c in chunks:
        assert c.text.strip(), "empty chunk"
        assert len(words(c.text)) <= max_words
    assert [w for c in chunks for w in words(c.text)] == words(parsed.text)


class TestTopicChunker(ChunkerContract):
    @pytest.fixture()
    def make_chunker(self) -> MAKE_CHUNKER:
        return lambda settings: TopicChunker(settings, HashingEmbedder())


class TestFixedChunker(ChunkerContract):
    @pytest.fixture()
    def make_chunker(self) -> MAKE_CHUNKER:
        return FixedChunker


# --- sentences ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Dr. Smith arrived at 3 p.m. today. He said hello.",
            ["Dr. Smith arrived at 3 p.m. today.", "He said hello."],
        ),
        (
            "Use hand tools, e.g. hammers, i.e. heavy ones. See Fig. 3 for details.",
            ["Use hand tools, e.g. hammers, i.e. heavy ones.", "See Fig. 3 for details."],
        ),
        (
            "The rate rose 3.5 percent to 12.75 in 2020. Version 1.2.3 shipped on example.com today.",
            ["The rate rose 3.5 percent to 12.75 in 2020.", "Version 1.2.3 shipped on example.com today."],
        ),
        (
            "John F. Kennedy met J. R. R. Tolkien. Prof. Jones vs. Mr. Brown was a debate.",
            ["John F. Kennedy met J. R. R. Tolkien.", "Prof. Jones vs. Mr. Brown was a debate."],
        ),
        ("Is it? Yes! Wow... Then it ended.", ["Is it?", "Yes!", "Wow...", "Then it ended."]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("I said no. Then it was No. 5 on the list.", ["I said no.", "Then it was No. 5 on the list."]),
        ("Smith et al. (2019) showed this. It holds.", ["Smith et al. (2019) showed this.", "It holds."]),
        ("This line wraps\nacross lines. And ends.", ["This line wraps across lines.", "And ends."]),
    ],
)
def test_split_sentences_cases(text: str, expected: list[str]) -> None:
    assert split_sentences(text) == expected


def test_split_sentences_lists_and_tables_are_boundaries() -> None:
    text = (
        "You need:\n- flour\n- two eggs\n  beaten well\n* milk\n1. Mix it\n2) Bake it\n(a) Eat it\n"
        "After the list.\n\nname | weeks\nparental | 16\n"
    )
    assert split_sentence_blocks(text) == [
        ["You need:"],
        ["- flour"],
        ["- two eggs beaten well"],
        ["* milk"],
        ["1. Mix it"],
        ["2) Bake it"],
        ["(a) Eat it"],
        ["After the list."],
        ["name | weeks"],
        ["parental | 16"],
    ]


def test_split_sentences_never_empty_and_keeps_every_word() -> None:
    text = "  \n\n. ! ?\n\n-  \n Word.   Another   word!\n\n\n"
    out = split_sentences(text)
    assert all(s.strip() for s in out)
    assert words(" ".join(out)) == words(text)
    assert split_sentences("") == []
    assert split_sentences(" \n\t ") == []


def test_split_sentences_windows_long_sentences() -> None:
    table = " ".join(f"cell{i}" for i in range(505))  # no punctuation at all
    out = split_sentences(table, max_words=100)
    assert [len(words(s)) for s in out] == [85, 84, 84, 84, 84, 84]  # 6 windows, evenly sized
    assert words(" ".join(out)) == words(table)
    assert all(len(words(s)) <= 220 for s in split_sentences(table))  # default: the chunk maximum


# --- headers -----------------------------------------------------------------------------------------

LEAVE_DOC = (
    "Employees accrue annual leave monthly. Annual leave requests go to your manager. "
    "The leave policy applies to all staff.\n\n"
    "Parental leave is 16 weeks at full pay. Parental leave can start two weeks before the due date. "
    "Adoptive parents also get parental leave. Shared parental leave lets partners split the 16 weeks.\n\n"
    "Sick leave requires a doctor's note after three days. Sick leave is paid in full."
)
PARENTAL = LEAVE_DOC.split("\n\n")[1]


def test_salient_terms_prefers_chunk_specific_terms_and_bigrams() -> None:
    terms = salient_terms(PARENTAL, 3, doc_text=LEAVE_DOC)
    assert terms[:2] == ["parental leave", "16 weeks"]
    # "leave" alone is everywhere in the document: it is covered by the bigram, not listed again.
    assert "leave" not in terms
    assert salient_terms(PARENTAL, 3, doc_stats=DocTermStats.from_text(LEAVE_DOC)) == terms


def test_salient_terms_filters_stop_words_numbers_and_short_words() -> None:
    terms = salient_terms("The 2024 ox and the ox ate 2024 oats at the farm, the farm.", 10)
    assert "farm" in terms
    assert not {"the", "and", "2024", "ox", "at"} & {t.lower() for t in terms}
    assert salient_terms("anything at all", 0) == []
    assert salient_terms("", 5) == []


def test_salient_terms_keeps_surface_form_and_honours_exclude() -> None:
    text = "GDPR requires consent. GDPR fines are large. Consent must be explicit."
    assert salient_terms(text, 2) == ["GDPR", "consent"]
    assert "GDPR" not in salient_terms(text, 5, exclude=["GDPR rules"])


def test_build_header_omits_empty_parts() -> None:
    assert (
        build_header("Leave policy", ["Benefits", "Parental leave"], ["parental leave", "16 weeks"])
        == "Title: Leave policy | Section: Benefits > Parental leave | Key terms: parental leave, 16 weeks"
    )
    assert build_header("", ["Benefits"], []) == "Section: Benefits"
    assert build_header("T", [], []) == "Title: T"
    assert build_header("", [], []) == ""
    assert len(build_header("x" * 1000, ["y"] * 10, [])) < 500


# --- topic chunker -----------------------------------------------------------------------------------


def test_two_topics_are_cut_at_the_topic_boundary() -> None:
    embedder = HashingEmbedder()
    chunker = TopicChunker(ChunkingSettings(min_words=20, max_words=120, header_terms=0), embedder)
    parsed = doc(([], " ".join(COOKING + ASTRONOMY)))
    assert len(words(parsed.text)) > 120

    chunks = chunker.chunk("d1", "t1", parsed)

    assert embedder.calls == [len(COOKING) + len(ASTRONOMY)]  # one batched call, each sentence once
    assert len(chunks) >= 2
    for c in chunks:
        has_cooking = any(s in c.text for s in COOKING)
        has_astronomy = any(s in c.text for s in ASTRONOMY)
        assert has_cooking != has_astronomy, c.text
    check_invariants(chunks, parsed, 120, "d1")


def test_short_document_is_one_chunk_without_embedding() -> None:
    embedder = HashingEmbedder()
    chunker = TopicChunker(ChunkingSettings(), embedder)
    parsed = doc((["Intro"], "A short note. It has two sentences."), title="Note")
    chunks = chunker.chunk("d", "t", parsed, source="s3://x", version=3)
    assert embedder.calls == []
    assert len(chunks) == 1
    c = chunks[0]
    assert (c.chunk_id, c.ordinal, c.text, c.section_path) == (
        "d#0",
        0,
        "A short note. It has two sentences.",
        ["Intro"],
    )
    assert (c.title, c.source, c.version, c.tenant, c.doc_id) == ("Note", "s3://x", 3, "t", "d")


def test_section_boundaries_are_respected() -> None:
    embedder = HashingEmbedder()
    chunker = TopicChunker(ChunkingSettings(min_words=10, max_words=60, header_terms=0), embedder)
    cooking, astronomy = " ".join(COOKING), " ".join(ASTRONOMY)
    parsed = doc((["Kitchen"], cooking), (["Sky"], astronomy), (["Kitchen", "Again"], COOKING[0]))
    chunks = chunker.chunk("d", "t", parsed)
    assert len(embedder.calls) == 1
    by_path: dict[tuple[str, ...], list[str]] = {}
    for c in chunks:
        by_path.setdefault(tuple(c.section_path), []).append(c.text)
    assert words(" ".join(by_path[("Kitchen",)])) == words(cooking)
    assert words(" ".join(by_path[("Sky",)])) == words(astronomy)
    assert by_path[("Kitchen", "Again")] == [COOKING[0]]
    check_invariants(chunks, parsed, 60, "d")


def test_small_sections_merge_into_the_next_under_the_same_parent() -> None:
    chunker = TopicChunker(ChunkingSettings(min_words=10, max_words=200), HashingEmbedder())
    parsed = doc(
        (["Benefits", "Intro"], "Benefits overview."),  # tiny: merged into its sibling
        (["Benefits", "Leave"], " ".join(COOKING[:3])),
        (["Pay", "Intro"], "Pay basics."),  # tiny, but the next section has another parent
        (["Travel"], " ".join(ASTRONOMY[:3])),
        (["Travel", "Blank"], "   "),  # blank sections vanish
    )
    chunks = chunker.chunk("d", "t", parsed)
    assert [c.section_path for c in chunks] == [["Benefits", "Intro"], ["Pay", "Intro"], ["Travel"]]
    assert chunks[0].text.startswith("Benefits overview.\n")
    assert chunks[1].text == "Pay basics."
    check_invariants(chunks, parsed, 200, "d")


def test_small_section_before_a_long_one_labels_only_the_chunk_it_starts() -> None:
    embedder = HashingEmbedder()
    chunker = TopicChunker(ChunkingSettings(min_words=20, max_words=60, header_terms=0), embedder)
    parsed = doc((["Recipes"], "Our recipes."), (["Recipes", "Cake"], " ".join(COOKING)))
    chunks = chunker.chunk("d", "t", parsed)
    assert len(chunks) >= 2
    assert chunks[0].text.startswith("Our recipes.\n")
    assert chunks[0].section_path == ["Recipes"]
    assert all(c.section_path == ["Recipes", "Cake"] for c in chunks[1:])
    check_invariants(chunks, parsed, 60, "d")


def test_headers_carry_title_section_and_terms() -> None:
    chunker = TopicChunker(ChunkingSettings(min_words=5, header_terms=3), HashingEmbedder())
    parsed = doc(
        (["Benefits", "Annual leave"], LEAVE_DOC.split("\n\n")[0]),
        (["Benefits", "Parental leave"], PARENTAL),
        title="Leave policy",
    )
    chunks = chunker.chunk("d", "t", parsed)
    header = chunks[1].header
    assert header.startswith("Title: Leave policy | Section: Benefits > Parental leave | Key terms: ")
    assert "16 weeks" in header
    assert chunks[1].indexed_text == f"{header}\n{chunks[1].text}"
    assert "Key terms" not in chunks[1].text

    override = chunker.chunk("d", "t", parsed, title="Handbook")
    assert override[0].title == "Handbook"
    assert override[0].header.startswith("Title: Handbook | ")

    bare = TopicChunker(ChunkingSettings(header_terms=0), HashingEmbedder())
    plain = bare.chunk("d", "t", doc(([], PARENTAL)))
    assert plain[0].header == ""
    assert plain[0].indexed_text == plain[0].text


def test_long_section_is_bounded_and_deterministic() -> None:
    text = "\n\n".join(" ".join(COOKING if i % 2 == 0 else ASTRONOMY) for i in range(8))
    parsed = doc(([], text))
    s = ChunkingSettings(min_words=40, max_words=100)
    first = TopicChunker(s, HashingEmbedder()).chunk("d", "t", parsed)
    second = TopicChunker(s, HashingEmbedder()).chunk("d", "t", parsed)
    assert first == second
    check_invariants(first, parsed, 100, "d")
    assert all(len(words(c.text)) >= 40 for c in first)


def test_run_on_text_without_punctuation_is_windowed() -> None:
    parsed = doc(([], " ".join(f"token{i}" for i in range(1000))))
    chunks = TopicChunker(ChunkingSettings(min_words=20, max_words=100), HashingEmbedder()).chunk(
        "d", "t", parsed
    )
    check_invariants(chunks, parsed, 100, "d")


def test_empty_document_embeds_nothing() -> None:
    embedder = HashingEmbedder()
    assert TopicChunker(ChunkingSettings(), embedder).chunk("d", "t", doc(([], "  \n "))) == []
    assert embedder.calls == []


VOCAB = [w.strip(".,").lower() for s in COOKING + ASTRONOMY for w in s.split()] + ["Dr.", "e.g.", "3.5"]


ENDINGS = [". ", "? ", "\n", "\n\n", "\n- ", " ", ".\n1. ", " | "]


@st.composite
def documents(draw: st.DrawFn) -> ParsedDocument:
    sections = []
    for i in range(draw(st.integers(1, 4))):
        # Sentence shapes come from hypothesis; their words from a seeded RNG (drawing thousands of
        # words one by one makes the test slow without finding more).
        shapes = draw(st.lists(st.tuples(st.integers(1, 45), st.sampled_from(ENDINGS)), max_size=30))
        rng = draw(st.randoms(use_true_random=False))
        text = "".join(" ".join(rng.choices(VOCAB, k=n)) + end for n, end in shapes)
        path = draw(st.sampled_from([[], ["A"], ["A", "B"], ["A", "C"], ["D"]]))
        sections.append(Section(path=[*path, str(i)] if path else [], text=text))
    return ParsedDocument(title="T", sections=sections)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    parsed=documents(),
    min_words=st.integers(1, 60),
    extra=st.integers(0, 150),
    window=st.integers(1, 3),
    depth_std=st.floats(-1.0, 2.0),
)
def test_topic_chunker_properties(
    parsed: ParsedDocument, min_words: int, extra: int, window: int, depth_std: float
) -> None:
    max_words = max(8, min_words + extra)
    s = ChunkingSettings(
        min_words=min_words, max_words=max_words, window_sentences=window, depth_std=depth_std
    )
    embedder = HashingEmbedder()
    chunks = TopicChunker(s, embedder).chunk("doc", "t", parsed)
    check_invariants(chunks, parsed, max_words, "doc")
    assert len(embedder.calls) <= 1


# --- fixed chunker -----------------------------------------------------------------------------------


def test_fixed_chunker_windows_overlap() -> None:
    first = " ".join(f"a{i}" for i in range(30))
    second = " ".join(f"b{i}" for i in range(30))
    parsed = doc((["One"], first), (["Two"], second), title="T")
    s = ChunkingSettings(method="fixed", min_words=1, max_words=20, fixed_overlap_words=5, header_terms=2)
    chunks = FixedChunker(s).chunk("d", "t", parsed)
    all_words = words(parsed.text)
    assert [words(c.text) for c in chunks] == [
        all_words[0:20],
        all_words[15:35],
        all_words[30:50],
        all_words[45:60],
    ]
    for a, b in itertools.pairwise(chunks):
        assert words(a.text)[-5:] == words(b.text)[:5]
    assert [c.section_path for c in chunks] == [["One"], ["One"], ["Two"], ["Two"]]
    assert [c.chunk_id for c in chunks] == ["d#0", "d#1", "d#2", "d#3"]
    assert chunks[0].header.startswith("Title: T | Section: One | Key terms: ")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parsed=documents(), max_words=st.integers(8, 120), overlap_fraction=st.floats(0.0, 0.9))
def test_fixed_chunker_properties(parsed: ParsedDocument, max_words: int, overlap_fraction: float) -> None:
    overlap = min(max_words - 1, int(max_words * overlap_fraction))
    s = ChunkingSettings(method="fixed", min_words=1, max_words=max_words, fixed_overlap_words=overlap)
    chunks = FixedChunker(s).chunk("doc", "t", parsed)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    step = max_words - overlap
    expected = words(parsed.text)
    got: list[str] = []
    for c in chunks:
        assert c.text.strip()
        assert len(words(c.text)) <= max_words
        got.extend(words(c.text)[: step if c is not chunks[-1] else None])
    assert got == expected  # windows start every `step` words and the last one reaches the end


def test_fixed_chunker_keeps_line_breaks_and_rejects_bad_overlap() -> None:
    parsed = doc(([], "line one\nline two"))
    chunks = FixedChunker(ChunkingSettings(header_terms=0)).chunk("d", "t", parsed)
    assert [c.text for c in chunks] == ["line one\nline two"]
    assert chunks[0].header == ""
    with pytest.raises(ValueError, match="fixed_overlap_words"):
        FixedChunker(ChunkingSettings(max_words=20, fixed_overlap_words=20))


def test_build_chunker_picks_the_configured_method() -> None:
    assert isinstance(build_chunker(ChunkingSettings(method="fixed"), None), FixedChunker)
    assert isinstance(build_chunker(ChunkingSettings(), HashingEmbedder()), TopicChunker)
    with pytest.raises(ValueError, match="needs an embedder"):
        build_chunker(ChunkingSettings(method="topic"), None)
