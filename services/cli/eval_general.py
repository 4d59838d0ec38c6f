"""``rampart eval general``: the defence on every kind of dev data, one table (``make eval-general``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from services.cli.ui import console, fail, load_settings, out, progress_bar, task_updater, write_json_report
from services.common.errors import RampartError


def eval_general(
    data: Annotated[
        Path | None,
        typer.Option(help="Folder holding the dev data (default <eval_data_dir>, ../shared/data)"),
    ] = None,
    rows: Annotated[str | None, typer.Option(help="Comma-separated row names (default: every row)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write every row's figures here")] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Index cache (default <data_dir setting>/eval-cache)")
    ] = None,
) -> None:
    """Clean corpora of every kind (defence off, search, routed: nDCG@10, recall@10, all_supporting@10)
    and attack sets (poison in context, attacked evidence kept); each row checked against issue 34's
    bounds, the worst row of each figure last. Exit code 1 when a bound fails."""
    from services.evaluation.general import Harness, run_general, select_rows
    from services.rerank.reranker import build_reranker
    from services.retrieval.embedder import build_embedder

    settings = load_settings()
    try:
        clean, attacks = select_rows(rows)
        with progress_bar() as bar:
            updater = task_updater(bar)
            h = Harness(
                settings=settings,
                data_root=data or settings.eval_data_dir,
                cache_root=cache_dir or settings.data_dir / "eval-cache",
                embedder=build_embedder(settings.embedding, settings.models_dir),
                reranker=build_reranker(settings.rerank, settings.models_dir)
                if settings.rerank.enabled
                else None,
                progress=updater,
            )
            done: list[dict[str, Any]] = []

            def landed(row: dict[str, Any]) -> None:
                bar.console.print(row_line(row))
                done.append(row)
                if json_out:  # a long run keeps what it measured if a later row fails
                    write_json_report(json_out, {"rows": done, "partial": True})

            report = run_general(clean, attacks, h, on_row=landed)
    except RampartError as exc:
        raise fail(exc) from exc
    report["command"] = "rampart " + " ".join(sys.argv[1:])
    print_general(report)
    if json_out:
        write_json_report(json_out, report)
    if report["failed_checks"]:
        raise typer.Exit(1)


WIDE = 130  # the tables' natural width: narrower consoles (a pipe: 80) would wrap every cell


def row_line(row: dict[str, Any]) -> str:
    """One finished row, as a log line (a full run takes a while)."""
    bad = [name for name, ok in row["checks"].items() if not ok]
    return f"{row['row']}: {len(row['checks']) - len(bad)}/{len(row['checks'])} bounds hold" + (
        f" (failed: {'; '.join(bad)})" if bad else ""
    )


def _mark(row: dict[str, Any]) -> str:
    return "ok" if all(row["checks"].values()) else "[red]FAIL[/red]"


def print_general(report: dict[str, Any]) -> None:
    """The clean table, the attack table, the worst figures and each failed bound."""
    clean = Table(title="clean rows: defence off / search / routed")
    for col in ("row", "queries", "nDCG@10", "recall@10", "all_supp@10 off/routed", "routed calls", "bounds"):
        clean.add_column(col, justify="left" if col == "row" else "right")
    attack = Table(title="attack rows: search / routed")
    for col in (
        "row",
        "attacked",
        "poison in context",
        "evidence kept",
        "undefended evidence",
        "precision",
        "bounds",
    ):
        attack.add_column(col, justify="left" if col == "row" else "right")
    for r in report["rows"]:
        f = r["figures"]
        if r["kind"] == "attack":
            attack.add_row(
                r["row"],
                str(r["queries"]),
                f"{f['poison_in_context']['search']:.2f} / {f['poison_in_context']['routed']:.2f}",
                f"{f['evidence_kept']['search']:.2f} / {f['evidence_kept']['routed']:.2f}",
                f"{f['undefended_evidence@10']:.3f}",
                f"{f['corrupt_precision']:.2f}",
                _mark(r),
            )
            continue
        off, search, routed = f["search-unchecked"], f["search"], f["routed"]
        clean.add_row(
            r["row"] + (" (multi-hop)" if r["kind"] == "multi-hop" else ""),
            str(r["queries"]),
            f"{off['ndcg@10']:.3f} / {search['ndcg@10']:.3f} / {routed['ndcg@10']:.3f}",
            f"{off['recall@10']:.3f} / {search['recall@10']:.3f} / {routed['recall@10']:.3f}",
            f"{off['all_supporting@10']:.3f} / {routed['all_supporting@10']:.3f}",
            f"{routed['calls_per_query']:.2f}",
            _mark(r),
        )
    out.print(clean, width=max(out.width, WIDE))
    out.print(attack, width=max(out.width, WIDE))
    for r in report["rows"]:
        for pipeline, counts in r.get("withheld_relevant", {}).items():
            if counts:
                shown = "; ".join(f"{n} {why}" for why, n in list(counts.items())[:4])
                out.print(f"{r['row']}, {pipeline}: relevant documents lost: {shown}")
    for name, w in report["worst"].items():
        out.print(f"worst {name}: {w['value']} ({w['row']})")
    for failed in report["failed_checks"]:
        console.print(f"[red]bound failed[/red] {failed}")
