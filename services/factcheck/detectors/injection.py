"""Prompt-injection detector: text addressed to a model rather than to a reader.

Why patterns and not a model: no pretrained injection classifier is available offline, and the
phrases attackers use are few and stable ("ignore previous instructions", role play, "do not mention",
tool or exfiltration requests). Each family adds weight; one strong family is enough to flag, a
weak one (e.g. "respond with") alone is not, because ordinary how-to pages say such things too.
"""

from __future__ import annotations

import re

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
            r"^\s*#{2,}\s*(system|instruction|new instructions)\b|^\s*(system|assistant)\s*:",
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
        "exfiltration",
        0.6,
        re.compile(
            r"\b(send|forward|email|post|upload|submit)\b[^.\n]{0,40}\b(password|passcode|mfa|2fa|otp|"
            r"one-time code|credentials?|api key|token|secret)s?\b|"
            r"\b(call|invoke|execute|run)\s+(the\s+)?(function|tool|command|shell|script)\b|"
            r"!\[[^\]]*\]\(https?://[^)]*\?[^)]*=",
            _FLAGS,
        ),
    ),
]


def detect_injection(text: str) -> Signal:
    """Score = sum of the weights of the pattern families found (capped at 1); evidence = the matches."""
    total, found = 0.0, []
    for family, weight, pattern in PATTERNS:
        m = pattern.search(text)
        if m:
            total += weight
            found.append(f"{family}: {m.group(0).strip()[:80]!r}")
    return Signal(min(1.0, total), "; ".join(found))
