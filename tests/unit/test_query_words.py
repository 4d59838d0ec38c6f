"""One rule for "nothing to search for": blank, or no letter or digit in any script."""

from __future__ import annotations

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.query_text import check_query, has_words, query_problem


@pytest.mark.parametrize("query", ["leave", "L3", "42", "休假政策", "Ürlaub?", "  what's new?  ", "١٢٣", "x"])
def test_words_in_any_script_are_searchable(query: str) -> None:
    assert has_words(query)
    assert query_problem(query) is None
    check_query(query)


@pytest.mark.parametrize("query", ["???", "\u0000", "🙂🙂", "\x07\x1b", "-- ... !!", "\u200b", "™©®"])
def test_no_letter_or_digit_is_no_words(query: str) -> None:
    assert not has_words(query)
    with pytest.raises(RampartError) as err:
        check_query(query)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert err.value.details == {"field": "query"}
    assert err.value.message.startswith("query has no words (letters or digits) to search for: ")
    assert repr(query) in err.value.message and "send the words" in err.value.message


@pytest.mark.parametrize("query", ["", "   ", "\t\n"])
def test_blank_keeps_its_message(query: str) -> None:
    with pytest.raises(RampartError) as err:
        check_query(query)
    assert err.value.message == "query is blank; send the words to search for"


def test_long_wordless_query_is_shown_cut_and_field_is_named() -> None:
    problem = query_problem("?" * 500, "history[2]")
    assert problem is not None and problem.startswith("history[2] has no words")
    assert "?" * 41 not in problem and "..." in problem
    with pytest.raises(RampartError) as err:
        check_query("!!", field="sub_query")
    assert err.value.details == {"field": "sub_query"}
