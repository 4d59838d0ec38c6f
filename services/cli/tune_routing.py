"""``rampart tune routing``: arguments and printing; the grid search is
:mod:`services.evaluation.routing_tune`'s. Prints the ``RAMPART_ROUTING__PLANS`` value to set, and with
``--out`` writes the route-plans artifact."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from services.cli.ui import (
    console,
    fail,
    load_settings,
    out,
    progress_bar,
    task_updater,
    write_json_report,
)
from services.common.errors import RampartError


def tune_routing(
    low_set: Annotated[Path, typer.Option(help="BEIR set for the low plan (a folder or a name)")] = Path(
        "scifact"
    ),
    low_split: Annotated[
        str, typer.Option(help="Its qrels split: a training/dev split, never test")
    ] = "train",
    multi_hop_set: Annotated[
        Path, typer.Option(help="BEIR set for medium/high; only its `train` query half is read")
    ] = Path("hotpotqa_dev500"),
    step: Annotated[
        float, typer.Option(min=0.01, max=0.5, help="BM25 weight grid step (dense = 1 - bm25)")
    ] = 0.1,
    metric: Annotated[str, typer.Option(help="Metric to maximise (document level, first stage)")] = "ndcg@10",
    max_queries: Annotated[
        int | None, typer.Option(min=1, help="At most this many queries per set (smoke runs)")
    ] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Index cache (default <data_dir setting>/eval-cache)")
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the grid and the choice here")
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write the chosen table here as a route-plans artifact (plans.json, manifest.json, "
            "MODEL_CARD.md) for RAMPART_ROUTING__PLANS_DIR",
        ),
    ] = None,
) -> None:
    """Grid-search bm25/dense weights per complexity on dev qrels; print RAMPART_ROUTING__PLANS, and
    with --out write the route-plans artifact (docs/routing.md)."""
    from services.evaluation.routing_tune import save_plans
    from services.evaluation.routing_tune import tune_routing as grid_search

    settings = load_settings()
    try:
        with progress_bar() as bar:
            tuned = grid_search(
                settings,
                low_set=low_set,
                low_split=low_split,
                multi_hop_set=multi_hop_set,
                step=step,
                metric=metric,
                max_queries=max_queries,
                cache_dir=cache_dir or settings.data_dir / "eval-cache",
                say=console.print,
                progress=task_updater(bar),
            )
    except RampartError as exc:
        raise fail(exc) from exc
    results, counts, plans, chosen = tuned.results, tuned.counts, tuned.plans, tuned.chosen
    _print(results, chosen, metric, counts)
    value = json.dumps(plans, separators=(",", ":"))
    console.print("settings to use (the whole table: one level alone cannot be set by env):")
    out.print(f"RAMPART_ROUTING__PLANS='{value}'", soft_wrap=True, markup=False)
    command = "rampart " + " ".join(sys.argv[1:])
    if out_dir:
        save_plans(tuned, out_dir, command=command)
        console.print(
            f"route plans written to {out_dir}: to use them, set RAMPART_ROUTING__PLANS_DIR={out_dir}"
        )
    if json_out:
        write_json_report(
            json_out,
            {
                "command": command,
                "metric": metric,
                "queries": counts,
                "grid": {lvl: {str(w): s for w, s in r.items()} for lvl, r in results.items()},
                "chosen": chosen,
                "plans": plans,
            },
        )


def _print(
    results: dict[str, dict[float, float]],
    chosen: dict[str, dict[str, float]],
    metric: str,
    counts: dict[str, int],
) -> None:
    table = Table(title=f"{metric} by BM25 weight (dense = 1 - BM25), first stage, per complexity")
    table.add_column("bm25")
    for level in results:
        table.add_column(f"{level} ({counts[level]} q)", justify="right")
    for w in next(iter(results.values())):
        cells = []
        for level, scores in results.items():
            mark = " *" if chosen[level]["bm25_weight"] == w else ""
            cells.append(f"{scores[w]:.4f}{mark}")
        table.add_row(f"{w:.2f}", *cells)
    out.print(table)
