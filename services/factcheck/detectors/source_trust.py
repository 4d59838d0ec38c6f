"""Source-trust detector: documents whose source or metadata the operator marked as untrusted.

Operators know which corners of their estate anyone can write to (a community wiki, a shared drive,
mail imports). ``factcheck.untrusted_sources`` lists glob patterns over a chunk's ``source``; a
document whose metadata says ``trust: untrusted`` counts too. Untrusted is not adversarial by itself:
it lowers the bar the content detectors must clear (see the classifier).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase

from services.factcheck.detectors import Signal


def detect_untrusted(source: str, metadata: Mapping[str, object], patterns: Sequence[str]) -> Signal:
    trust = str(metadata.get("trust", "")).strip().lower()
    if trust == "untrusted":
        return Signal(1.0, "metadata trust=untrusted")
    for pattern in patterns:
        if source and fnmatchcase(source, pattern):
            return Signal(1.0, f"source {source!r} matches untrusted pattern {pattern!r}")
    return Signal.none()
