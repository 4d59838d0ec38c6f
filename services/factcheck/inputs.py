"""Validation shared by every fact-checker: what a check may be asked, with errors that say the fix."""

from __future__ import annotations

from collections.abc import Sequence

from services.common.errors import invalid
from services.factcheck.evidence import CheckInput

MAX_ITEMS = 100


def check_items(query: str, items: Sequence[CheckInput]) -> list[CheckInput]:
    if not isinstance(query, str) or not query.strip():
        raise invalid("fact-check query must be a non-empty string", field="query")
    out = list(items)
    if len(out) > MAX_ITEMS:
        raise invalid(f"fact-check takes at most {MAX_ITEMS} passages, got {len(out)}; lower factcheck.depth")
    bad = [k for k, i in enumerate(out) if not isinstance(i, CheckInput)]
    if bad:
        raise invalid(f"fact-check items {bad[:5]} are not CheckInput; build them with CheckInput(...)")
    return out
