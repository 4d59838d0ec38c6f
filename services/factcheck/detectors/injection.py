"""Prompt-injection detector: text addressed to a model rather than to a reader.

Why patterns and not a model: no pretrained injection classifier is available offline, and the
phrases attackers use are few and stable ("ignore previous instructions", role play, "do not mention",
tool or exfiltration requests). Each family adds weight; one strong family is enough to flag, a
weak one (e.g. "respond with") alone is not, because ordinary how-to pages say such things too.

Every family runs in time linear in the text (``tests/unit/test_bounded_time.py``): repetition is
bounded ({0,40}) or anchored where it cannot restart, and the one shape a regex cannot search in linear
time, a Markdown image whose URL carries a query string, is found by :func:`_image_with_query`, a scan.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from services.factcheck.detectors import Signal

_FLAGS = re.IGNORECASE | re.UNICODE

# (family, weight, pattern). Weights: 1.0 = flags alone; 0.5 = needs a second family.
PATTERNS: list[tuple[str, float, re.Pattern[str]]] = [
    (
        "override",
        1.0,
        re.compile(
            r"\b(ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}?\b(previous|prior|above|earlier|"
            r"preceding|all|any|your|the|system|original)\b[^.\n]{0,30}?\b(instructions?|prompts?|rules?|"
            r"guidelines?|directions?|context|messages?|polic(y|ies))\b",
            _FLAGS,
        ),
    ),
    (
        "addressed_to_model",
        1.0,
        re.compile(
            r"\b(note|message|instructions?)\s+(for|to)\s+(the\s+)?(ai|llm|language model|assistants?|"
            r"chat ?bots?|gpt|copilot|models?)\b|\b(dear|attention|hey)\s+(ai|llm|assistant|chat ?bot)\b|"
            r"\bas an? (ai|large language model|language model)\b",
            _FLAGS,
        ),
    ),
    (
        "model_markup",
        1.0,
        re.compile(
            r"<\|?(im_start|im_end|system|endoftext|eot_id|start_header_id)\|?>|\[/?INST\]|<<SYS>>|"
            r"^[^\S\n]*#{2,}\s*(system|instruction|new instructions)\b|^[^\S\n]*(system|assistant)\s*:",
            _FLAGS | re.MULTILINE,
        ),
    ),
    (
        "role_play",
        0.6,
        re.compile(
            r"\b(you are now|from now on,? you|act as|pretend (to be|you are)|roleplay as|role-play as|"
            r"your new (role|task|instructions?) (is|are)|new instructions?\s*:|developer mode|jailbreak)\b",
            _FLAGS,
        ),
    ),
    (
        "concealment",
        0.6,
        re.compile(
            r"\b(do not|don't|never)\s+(mention|reveal|disclose|tell (the )?(user|anyone) about|cite|"
            r"show)\b[^.\n]{0,40}\b(this|these|note|instructions?|prompt|source|policy)\b",
            _FLAGS,
        ),
    ),
    (
        "answer_steering",
        0.5,
        re.compile(
            r"\b(always|only)\s+(answer|respond|reply|say|output)\b|\b(tell|inform) the user (that|to)\b|"
            r"\bwhen (asked|someone asks|the user asks)\b[^.\n]{0,60}\b(answer|respond|reply|say)\b",
            _FLAGS,
        ),
    ),
    (
        # What to put in "your response/reply/answer/output": a reader of a document writes no answer,
        # the model answering from it does. The phrase occurs in none of 29,970 clean dev passages
        # (policies, abstracts, news, e-mails, tables, code answers) and in 48 of BIPIA's 125 injected
        # instructions (docs/journal/2026-11-29-altered-copies.md); an e-mail's "Thank you for your
        # reply" opens with a word the sentence check skips. Linear: the prefix is bounded ({0,80}).
        "output_directive",
        1.0,
        re.compile(
            r"(?:^|[.!?:;]\s+|\n)[^\S\n]*(?!(?:i|we|thanks?|looking|appreciate|awaiting|best|kind|regards|"
            r"sincerely|many)\b)(?:[^.?!\n]|[.?!](?=\S)){0,80}?\b\w+\s+your\s+(?:response|reply|answer|output)s?\b",
            _FLAGS,
        ),
    ),
    (
        "exfiltration",
        0.6,
        re.compile(
            r"\b(send|forward|email|post|upload|submit)\b[^.\n]{0,40}\b(password|passcode|mfa|2fa|otp|"
            r"one-time code|credentials?|api key|token|secret)s?\b|"
            r"\b(call|invoke|execute|run)\s+(the\s+)?(function|tool|command|shell|script)\b",
            _FLAGS,
        ),
    ),
]
# The third exfiltration shape, a Markdown image whose URL sends data in its query string
# ("![x](https://evil.example/p?d=..."): the tokens :func:`_image_with_query` reads. It was the regex
# ``!\[[^\]]*\]\(https?://[^)]*\?[^)]*=``, which backtracked over every "![", "?" and "=": cubic,
# 14 s on a 20,000-character passage.
_IMAGE_TOKENS = re.compile(r"!\[|\]\(https?://|[\])?=]", _FLAGS)


def _image_with_query(text: str) -> tuple[int, int] | None:
    """Span of the first Markdown image whose ``http(s)://`` URL has a "?" and then a "=" before its ")"
    (through the URL's last "=", as the old regex matched it), in one pass over the tokens.

    An image's alt text runs to the first "]", so every "![" before that "]" shares its fate: only the
    first counts (``opened``). While inside a URL, a later image that also gets there ends at the same
    ")" and cannot succeed where this one fails, nor come first: it is ignored; an image opened inside
    the URL whose "]" comes after that ")" is still counted."""
    opened: int | None = None  # the first "![" not yet closed by a "]"
    url_of: int | None = None  # the image whose URL we are in
    asked = False  # a "?" seen in that URL
    last_eq: int | None = None  # end of its last "=" after a "?"
    for tok in _IMAGE_TOKENS.finditer(text):
        kind = tok.group(0)
        if kind == "![":
            opened = tok.start() if opened is None else opened
        elif kind[0] == "]":
            if len(kind) > 1 and opened is not None and url_of is None:
                url_of, asked, last_eq = opened, False, None
            opened = None
        elif url_of is not None:
            if kind == ")":
                if last_eq is not None:
                    return url_of, last_eq
                url_of = None
            elif kind == "?":
                asked = True
            elif asked:  # "="
                last_eq = tok.end()
    return (url_of, last_eq) if url_of is not None and last_eq is not None else None


def _exfiltration(text: str) -> str | None:
    """The exfiltration family: its regex, or an image URL with a query string, whichever comes first."""
    m = _EXFILTRATION.search(text)
    image = _image_with_query(text)
    if image is not None and (m is None or image[0] < m.start()):
        return text[image[0] : image[1]]
    return m.group(0) if m else None


def _finder(pattern: re.Pattern[str]) -> Callable[[str], str | None]:
    def find(text: str) -> str | None:
        m = pattern.search(text)
        return m.group(0) if m else None

    return find


_EXFILTRATION = PATTERNS[-1][2]
# (family, weight, the first match's text or None), as detect_injection applies them.
FINDERS: list[tuple[str, float, Callable[[str], str | None]]] = [
    (family, weight, _exfiltration if pattern is _EXFILTRATION else _finder(pattern))
    for family, weight, pattern in PATTERNS
]


def detect_injection(text: str) -> Signal:
    """Score = sum of the weights of the pattern families found (capped at 1); evidence = the matches."""
    total, found = 0.0, []
    for family, weight, find in FINDERS:
        match = find(text)
        if match is not None:
            total += weight
            found.append(f"{family}: {match.strip()[:80]!r}")
    return Signal(min(1.0, total), "; ".join(found))
