"""One rule for "is there anything to search for" shared by every entry point (HTTP, gRPC, in-process).

A query of punctuation, emoji or control characters alone (``???``, ``\\x00``, ``🙂🙂``) matches
nothing meaningful, yet BM25 and dense retrieval would still rank (and the fact-check judge) whatever
scores highest; it is refused like a blank one. A word is any Unicode letter or digit (CJK counts).
"""

from __future__ import annotations

from services.common.errors import invalid

WORD_PATTERN = r"[\p{L}\p{N}]"
"""The rule as the OpenAPI document states it (``query`` fields): a character of Unicode category
Letter or Number. ``str.isalnum``, which :func:`has_words` uses, is true for exactly those characters
(tests/unit/test_api_schema_rules.py checks every code point). Python's ``re`` has no ``\\p{..}``, and
``[^\\W_]`` would be read as ASCII by ECMA-262 and the JSON Schema tools that use it."""
SHOWN_CHARS = 40  # of a refused query, in the message (it is caller input: keep it short)


def has_words(text: str) -> bool:
    """Whether ``text`` holds at least one letter or digit (Unicode ``str.isalnum``)."""
    return any(ch.isalnum() for ch in text)


def query_problem(query: str, what: str = "query") -> str | None:
    """Why ``query`` cannot be searched (named ``what`` in the message), or ``None`` when it can."""
    if not query.strip():
        return f"{what} is blank; send the words to search for"
    if not has_words(query):
        shown = repr(query[:SHOWN_CHARS]) + ("..." if len(query) > SHOWN_CHARS else "")
        return f"{what} has no words (letters or digits) to search for: {shown}; send the words to search for"
    return None


def check_query(query: str, field: str = "query") -> None:
    """Raise INVALID_ARGUMENT naming ``field`` when ``query`` is blank or has no letter or digit."""
    problem = query_problem(query, field)
    if problem is not None:
        raise invalid(problem, field=field)
