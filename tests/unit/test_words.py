"""The shared tokenisers and stop lists: each variant reads the unit its callers need."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from services.common.words import (
    JOINED_WORD,
    KEY_TERM_STOP_WORDS,
    NAME_TOKEN,
    SPELLED_WORD,
    STOP_WORDS,
    WORD,
    content_word,
    stem,
    terms,
    words,
)

TEXT = "F.C. Ka-san's COVID-19 ward, AT&T (2017–18) James’s don't"


def test_each_tokeniser_keeps_what_its_callers_read_whole() -> None:
    assert WORD.findall(TEXT) == [
        "F",
        "C",
        "Ka",
        "san's",
        "COVID",
        "19",
        "ward",
        "AT",
        "T",
        "2017",
        "18",
        "James’s",
        "don't",
    ]
    assert JOINED_WORD.findall(TEXT) == [
        "F.C",
        "Ka-san's",
        "COVID-19",
        "ward",
        "AT",
        "T",
        "2017",
        "18",
        "James’s",
        "don't",
    ]
    assert NAME_TOKEN.findall(TEXT)[:6] == ["F.C", "Ka-san's", "COVID-19", "ward", ",", "AT&T"]
    assert "2017–18" in NAME_TOKEN.findall(TEXT)
    assert SPELLED_WORD.findall("James's James’s") == ["James", "s", "James", "s"]


def test_terms_are_stemmed_content_words() -> None:
    assert words("The Policies") == ["the", "policies"]
    assert terms("What are the policies of 2 firms?") == ["polici", "2", "firm"]
    assert not content_word("the") and not content_word("x") and content_word("7") and content_word("new")


def test_key_term_stop_words_are_broader_where_a_query_needs_the_word() -> None:
    assert {"first", "new", "two", "made"} <= KEY_TERM_STOP_WORDS
    assert not {"first", "new", "two", "made"} & STOP_WORDS


def test_stem_is_the_same_in_every_thread() -> None:
    vocab = [
        f"{w}{suffix}"
        for w in ("connect", "polic", "run", "nation")
        for suffix in ("", "s", "ing", "ed", "ies")
    ]
    want = [stem(w) for w in vocab]
    stem.cache_clear()
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: [stem(w) for w in vocab], range(8)))
    assert all(g == want for g in got)
