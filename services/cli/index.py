"""``rampart index migrate``: move the OpenSearch index to this Rampart's layout version, with no
downtime for searches (services/retrieval/opensearch_migrate.py, docs/opensearch.md).

The embedded index has no layout versions: it keeps its truth in SQLite and rebuilds the BM25 and
vector files from it on open when they disagree, so the command says there is nothing to migrate.
"""

from __future__ import annotations

from typing import Annotated

import typer

from services.cli.ui import console, fail, load_settings
from services.common.errors import RampartError

index_app = typer.Typer(help="The index's layout (index.backend=opensearch).", no_args_is_help=True)


@index_app.command("migrate")
def index_migrate(
    keep_old: Annotated[
        bool,
        typer.Option(
            "--keep-old/--delete-old",
            help="Keep the old indexes (write-blocked, out of the aliases) instead of deleting them",
        ),
    ] = False,
) -> None:
    """Copy an OpenSearch index of an older layout into the current one and swap its aliases at once
    (searches keep answering; writes wait as UNAVAILABLE until the swap)."""
    settings = load_settings()
    if settings.index.backend != "opensearch":
        console.print(
            f"nothing to migrate: the embedded index ({settings.data_dir / 'index'}) has no layout versions; "
            "it rebuilds its BM25 and vector files from its SQLite store when they disagree. "
            "`rampart index migrate` applies to RAMPART_INDEX__BACKEND=opensearch."
        )
        return
    from services.retrieval.opensearch_layout import SCHEMA_VERSION
    from services.retrieval.opensearch_migrate import migrate

    try:
        report = migrate(
            settings.opensearch,
            settings.index,
            keep_old=keep_old,
            progress=lambda m: console.print(f"• {m}"),
        )
    except RampartError as exc:
        raise fail(exc) from exc
    for s in report.steps:
        if s.old is None:
            console.print(f"{s.alias}: no index yet (the first open creates it at layout v{SCHEMA_VERSION})")
        elif s.new is None:
            console.print(f"{s.alias} → {s.old}: already at layout v{SCHEMA_VERSION}")
        else:
            console.print(
                f"{s.alias} → {s.new}: {s.documents} documents copied from {s.old} (layout v{s.version})"
            )
    if report.swapped:
        what = (
            f"kept (write-blocked): {', '.join(report.kept)}"
            if report.kept
            else f"deleted: {', '.join(report.deleted)}"
        )
        console.print(
            f"[green]migrated[/green] at {report.url} in {report.seconds:.1f} s; old indexes {what}"
        )
    else:
        console.print(f"nothing to migrate at {report.url}")
