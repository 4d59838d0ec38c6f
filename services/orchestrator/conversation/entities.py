"""Cheap entity mentions in queries and passages, for the session fact graph and query rewriting.

No NER model ships offline, so mentions are capitalised word runs (with inner connectives, as in
"Kiss and Tell" or "University of Oslo"), quoted titles and four-digit years. Sentence-initial
function words ("What", "The") and pronouns are not entities. Good enough to carry "Shirley Temple"
from one turn to the next; a real NER model can replace :func:`mentions` without touching callers.
"""

from __future__ import annotations

import re

from services.common.words import JOINED_WORD, STOP_WORDS

_QUOTED = re.compile(r"[\"“]([^\"”]{2,80})[\"”]")
_YEAR = re.compile(r"\b(1[5-9]\d\d|20\d\d)\b")
# Lower-case words allowed inside a capitalised run ("Bank of England", "Kiss and Tell").
_CONNECTIVES = frozenset({"of", "and", "the", "de", "la", "von", "van", "for", "in", "on", "&"})
# Capitalised words that open questions or sentences without naming anything.
_NOT_NAMES = frozenset(
    """what which who whom whose when where why how is are was were do does did can could would should
    will the a an and or but in on at of for to from by with as it its this that these those he she they
    his her their them him we you i my our your me us also then there here yes no not please
    according""".split()  # noqa: SIM905
)
# Imperatives that open a request ("Tell me…", "List the…"): names anywhere but first ("Kiss and Tell").
_OPENERS = frozenset(
    {
        "tell",
        "give",
        "show",
        "find",
        "list",
        "name",
        "describe",
        "explain",
        "compare",
        "open",
        "click",
        "go",
        "use",
    }
)

MAX_MENTIONS = 32  # per text: bounded work on long passages


def _is_name(word: str) -> bool:
    return word[:1].isupper() and word.lower() not in _NOT_NAMES


def _name_end(text: str, tokens: list[re.Match[str]], i: int) -> int:
    """Index of the last token of the name that starts at token ``i``: capitalised words and numbers,
    joined by lower-case connectives ("Bank of England"), up to any punctuation."""
    j = i + 1
    end = i
    while j < len(tokens):
        nxt = tokens[j].group()
        if text[tokens[j - 1].end() : tokens[j].start()].strip():
            break  # punctuation between words ends a name ('Leave "Connect' is not one)
        if _is_name(nxt) or nxt.isdigit():
            end = j
            j += 1
        elif nxt.lower() in _CONNECTIVES and j + 1 < len(tokens) and _is_name(tokens[j + 1].group()):
            # "Kiss and Tell" is one title, "Apple and Steve Jobs" two names: "and" joins one word
            if nxt.lower() in ("and", "&") and j + 2 < len(tokens) and _is_name(tokens[j + 2].group()):
                break
            j += 1
        else:
            break
    return end


def mentions(text: str) -> list[str]:
    """Entity mentions in order of first appearance, deduplicated by :func:`entity_key`."""
    found: list[str] = []
    seen: set[str] = set()

    def add(m: str) -> None:
        m = m.strip(" .,;:'’-")
        k = entity_key(m)
        if k and k not in seen and len(found) < MAX_MENTIONS:
            seen.add(k)
            found.append(m)

    for q in _QUOTED.findall(text):
        add(q)
    tokens = list(JOINED_WORD.finditer(text))
    i = 0
    while i < len(tokens):
        w = tokens[i].group()
        first = i == 0 or any(c in ".!?:;\n" for c in text[tokens[i - 1].end() : tokens[i].start()])
        if not _is_name(w) or (first and w.lower() in _OPENERS):
            i += 1
            continue
        end = _name_end(text, tokens, i)
        start = i
        if first and end > i + 1 and tokens[i + 1].group().lower() in _CONNECTIVES:
            # "Population of Norway": a capitalised first word before "of" is usually a common noun
            start = i + 2
        add(text[tokens[start].start() : tokens[end].end()])
        i = end + 1
    for y in _YEAR.findall(text):
        add(y)
    return found


def entity_key(mention: str) -> str:
    """Normalised key: lower case, content words only ("The Beatles" and "Beatles" meet)."""
    words = [w.lower() for w in JOINED_WORD.findall(mention)]
    content = [w for w in words if w not in STOP_WORDS]
    return " ".join(content or words)
