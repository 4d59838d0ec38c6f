"""``rampart index migrate``: move an OpenSearch index to this Rampart's layout version with no
downtime for searches (docs/opensearch.md, "Migrating the layout").

For each of the three aliases whose index is of an older layout: writes to the old index are
blocked (a write during the migration fails as UNAVAILABLE, which ingest retries, instead of landing
where the copy no longer looks), the new version is created with the current mappings and settings,
the node's ``_reindex`` copies the documents (one task per index, polled), and the counts are
compared. Then one ``_aliases`` request moves all three aliases at once: a search resolves the alias
either to the old indexes or to the new ones, never to a mix, and never to nothing. The old indexes
are deleted after a short grace (searches already running on them finish), or kept, write-blocked,
with ``keep_old``. A failure before the swap unblocks the old indexes and drops the half-built new
ones, so the index is as it was; running the command again starts over.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from services.common.errors import ErrorCode, RampartError
from services.retrieval.config import IndexSettings, OpenSearchSettings
from services.retrieval.opensearch_layout import SCHEMA_VERSION, chunks_body, documents_body, meta_body
from services.retrieval.opensearch_transport import Transport, alias_target, connect

GRACE_S = 2.0  # before deleting an old index: searches that resolved the alias just before the swap
POLL_S = 0.5


@dataclass
class Step:
    alias: str
    old: str | None
    new: str | None
    version: Any
    documents: int = 0


@dataclass
class Migration:
    """What ``migrate`` found and did, for the command to print."""

    url: str
    steps: list[Step] = field(default_factory=list)
    swapped: bool = False
    deleted: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    seconds: float = 0.0


def migrate(
    settings: OpenSearchSettings,
    index: IndexSettings,
    *,
    keep_old: bool = False,
    progress: Callable[[str], None] = lambda _: None,
    grace_s: float = GRACE_S,
) -> Migration:
    """Migrate ``settings.index_prefix``'s indexes to layout :data:`SCHEMA_VERSION` (module doc)."""
    begin = time.monotonic()
    t = connect(settings)
    try:
        t.call("connect", t.client.info, idempotent=True)
        report = Migration(t.url)
        p = settings.index_prefix
        for alias in (f"{p}-chunks", f"{p}-documents", f"{p}-meta"):
            report.steps.append(_inspect(t, alias))
        todo = [s for s in report.steps if s.old is not None and s.version != SCHEMA_VERSION]
        if todo:
            _copy_and_swap(t, todo, settings, index, progress)
            report.swapped = True
            if keep_old:
                report.kept = [str(s.old) for s in todo]
            else:
                time.sleep(grace_s)
                for s in todo:
                    t.call(
                        "delete old index",
                        functools.partial(t.client.indices.delete, index=s.old),
                        idempotent=True,
                    )
                    report.deleted.append(str(s.old))
        report.seconds = time.monotonic() - begin
        return report
    finally:
        t.close()


def _inspect(t: Transport, alias: str) -> Step:
    old = alias_target(
        t, alias, "point it at the one to keep (POST _aliases) and run `rampart index migrate` again"
    )
    if old is None:
        return Step(alias, None, None, None)
    got = t.call("get mapping", lambda: t.client.indices.get_mapping(index=old), idempotent=True)
    meta = got[old]["mappings"].get("_meta", {}) or {}
    version = meta.get("rampart_schema")
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise RampartError(
            ErrorCode.FAILED_PRECONDITION,
            f"the index {old} (alias {alias}) at {t.url} has layout version {version}, newer than this "
            f"Rampart's {SCHEMA_VERSION}: run a Rampart that reads version {version}; nothing was changed",
            index=old,
        )
    new = f"{alias}-v{SCHEMA_VERSION}" if version != SCHEMA_VERSION else None
    return Step(alias, old, new, version)


def _body(
    step: Step, meta: dict[str, Any], settings: OpenSearchSettings, index: IndexSettings
) -> dict[str, Any]:
    kind = step.alias.rsplit("-", 1)[1]
    if kind == "chunks":
        dim = meta.get("dim")
        if not isinstance(dim, int):
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"the index {step.old} records no vector dimension in its mapping's _meta; it was not made "
                "by Rampart: re-ingest under another RAMPART_OPENSEARCH__INDEX_PREFIX",
                index=step.old,
            )
        body = chunks_body(settings, index, dim)
    else:
        body = documents_body(settings) if kind == "documents" else meta_body(settings)
    body["mappings"]["_meta"] = {**meta, "rampart_schema": SCHEMA_VERSION}
    return body


def _copy_and_swap(
    t: Transport,
    todo: list[Step],
    settings: OpenSearchSettings,
    index: IndexSettings,
    progress: Callable[[str], None],
) -> None:
    blocked: list[str] = []
    created: list[str] = []
    try:
        for s in todo:
            assert s.old is not None and s.new is not None
            old, new = s.old, s.new
            got = t.call(
                "get mapping", functools.partial(t.client.indices.get_mapping, index=old), idempotent=True
            )
            body = _body(s, dict(got[old]["mappings"].get("_meta", {}) or {}), settings, index)
            if t.call("find index", functools.partial(t.client.indices.exists, index=new), idempotent=True):
                # left by a migration that died before its swap: nothing reads it
                t.call(
                    "drop half-built index",
                    functools.partial(t.client.indices.delete, index=new),
                    idempotent=True,
                )
            _block(t, old, True)
            blocked.append(old)
            t.call(
                "create index",
                functools.partial(t.client.indices.create, index=new, body=body),
                idempotent=False,
            )
            created.append(new)
            progress(f"copying {old} (layout v{s.version}) into {new}")
            s.documents = _reindex(t, old, new)
        actions: list[dict[str, Any]] = []
        for s in todo:
            actions += [
                {"remove": {"index": s.old, "alias": s.alias}},
                {"add": {"index": s.new, "alias": s.alias}},
            ]
        t.call(
            "swap aliases",
            lambda: t.client.indices.update_aliases(body={"actions": actions}),
            idempotent=True,
        )
    except BaseException:
        for name in created:
            t.call(
                "drop half-built index",
                functools.partial(t.client.indices.delete, index=name),
                idempotent=True,
            )
        for name in blocked:
            _block(t, name, False)
        raise


def _block(t: Transport, name: str, on: bool) -> None:
    body = {"index": {"blocks": {"write": on}}}
    t.call("block writes", lambda: t.client.indices.put_settings(index=name, body=body), idempotent=True)


def _reindex(t: Transport, old: str, new: str) -> int:
    """Copy ``old`` into ``new`` with the node's reindex task; returns the documents copied after
    checking that both hold as many."""
    body = {"source": {"index": old}, "dest": {"index": new, "op_type": "create"}}
    started = t.call(
        "start reindex",
        lambda: t.client.reindex(body=body, params={"wait_for_completion": "false", "refresh": "true"}),
        idempotent=False,
    )
    task = str(started["task"])
    while True:
        state = t.call("poll reindex", lambda: t.client.tasks.get(task_id=task), idempotent=True)
        if state.get("completed"):
            break
        time.sleep(POLL_S)
    resp = state.get("response", {})
    failures = resp.get("failures") or []
    if state.get("error") or failures:
        why = state.get("error") or failures[0]
        raise RampartError(
            ErrorCode.INTERNAL,
            f"reindexing {old} into {new} at {t.url} failed: {why}; nothing was swapped, the old index "
            "serves as before",
            index=old,
        )
    t.call("refresh", lambda: t.client.indices.refresh(index=new), idempotent=True)
    counts = [
        int(t.call("count", functools.partial(t.client.count, index=name), idempotent=True)["count"])
        for name in (old, new)
    ]
    if counts[0] != counts[1]:
        raise RampartError(
            ErrorCode.INTERNAL,
            f"reindexing {old} into {new} at {t.url} copied {counts[1]} of {counts[0]} documents; nothing was "
            "swapped, the old index serves as before; run `rampart index migrate` again",
            index=old,
        )
    return counts[1]


def drop_prefix(settings: OpenSearchSettings) -> None:
    """Delete every index of ``settings.index_prefix`` (a throw-away prefix: a benchmark's)."""
    t = connect(settings)
    try:
        pattern = f"{settings.index_prefix}-*"
        t.call("drop indexes", functools.partial(t.client.indices.delete, index=pattern), idempotent=True)
    finally:
        t.close()
