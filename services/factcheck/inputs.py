"""Validation shared by every fact-checker: what a check may be asked, with errors that say the fix."""

from __future__ import annotations

from collections.abc import Sequence

from services.common.errors import invalid
from services.factcheck.evidence import CheckInput

MAX_ITEMS = 100


def check_items(
    query: str, items: Sequence[CheckInput], context: Sequence[CheckInput] = ()
) -> list[CheckInput]:
    """The judged items followed by the context passages, validated together."""
    if not isinstance(query, str) or not query.strip():
        raise invalid("fact-check query must be a non-empty string", field="query")
    out = [*items, *context]
    if len(out) > MAX_ITEMS:
        raise invalid(
            f"fact-check takes at most {MAX_ITEMS} passages (judged + context), got {len(out)}; "
            "lower factcheck.depth or factcheck.context_depth"
        )
    bad = [k for k, i in enumerate(out) if not isinstance(i, CheckInput)]
    if bad:
        raise invalid(f"fact-check items {bad[:5]} are not CheckInput; build them with CheckInput(...)")
    dims = {len(i.vector) for i in out if i.vector}
    if len(dims) > 1 or not all(i.vector for i in out):
        # stored and freshly computed embeddings are not comparable (a header is in one, not the
        # other), nor are vectors of two sizes: embed them all alike
        out = [i.model_copy(update={"vector": None}) if i.vector is not None else i for i in out]
    return out
