"""Document names as the link stream looks them up: ``name_key`` (a title's key) and
``mentioned_names`` (the keys a text could name a document by) must agree with ``titles.names``."""

from __future__ import annotations

import pytest

from services.common.titles import MAX_NAME_WORDS, common_name, mentioned_names, name_key, names, spelled


@pytest.mark.parametrize(
    ("title", "key"),
    [
        ("Kiss and Tell (1945 film)", "Kiss and Tell"),
        ("James's Gate", "James s Gate"),
        ("Casino, New South Wales", "Casino New South Wales"),
        ("Will &amp; Grace", "Will Grace"),  # an HTML escape in a title is decoded, as the text has it
        ("Sport &amp; Leisure Swifts F.C.", "Sport Leisure Swifts F C"),
        ("1984 Tennessee Volunteers football team", "1984 Tennessee Volunteers football team"),
        ("US", None),  # too short: named by accident too often
        ("iPod", None),  # opens lower-case: not looked up
        ("", None),
        ("A Very Long Title That Has Far Too Many Words In It", None),
    ],
)
def test_name_key(title: str, key: str | None) -> None:
    assert name_key(title) == key


def test_an_escaped_title_is_named_by_the_text_that_spells_it_plainly() -> None:
    assert names(spelled("the sitcom Will & Grace aired on NBC"), "Will &amp; Grace")
    assert not names(spelled("the sitcom Will amp Grace"), "Will &amp; Grace")


def test_a_text_names_a_title_exactly_when_its_key_is_mentioned() -> None:
    text = (
        "Bleach, Nirvana's first album, came out on Sub Pop (Seattle) in 1989; the Casino, New South Wales."
    )
    mentioned = set(mentioned_names(text))
    for title in ["Sub Pop", "Nirvana (band)", "Nirvana's", "Bleach (album)", "Casino, New South Wales"]:
        assert names(spelled(text), title) and name_key(title) in mentioned
    for title in ["Sub Popular", "Pop Sub", "Casino Royale", "Tell"]:
        assert not names(spelled(text), title) and name_key(title) not in mentioned
    assert name_key("first album") is None  # lower-case: never looked up, though the text says it


def test_mentions_are_bounded_and_in_order() -> None:
    keys = mentioned_names("Alpha Beta and Gamma")
    assert keys[:2] == ["Alpha", "Alpha Beta"] and keys.index("Gamma") > keys.index("Beta")
    assert all(len(k.split()) <= MAX_NAME_WORDS for k in mentioned_names(" ".join(["Word"] * 50)))
    assert len(mentioned_names(" ".join(f"W{i}" for i in range(10_000)), limit=100)) == 100
    assert mentioned_names("") == [] and mentioned_names("all lower case words") == []


@pytest.mark.parametrize(
    ("title", "common"),
    [
        ("1920 (film)", True),  # a number: a year in any text
        ("December (magazine)", True),  # a month
        ("Hotel (1967 film)", True),  # the texts say "the hotel"
        ("Airport", False),  # one word, but the texts never use it in lower case
        ("Echosmith", False),
        ("Hotel California", False),  # two words: a name
        ("Sub Pop", False),
    ],
)
def test_common_name(title: str, common: bool) -> None:
    texts = spelled("Guests of the hotel met in December 1920. Hotel staff came from Echosmith's town.")
    assert common_name(title, texts) is common
