"""``rampart tune grading`` and ``rampart tune refinement``: arguments and printing; the fitting and
the measuring are :mod:`services.evaluation.grading_tune`'s (docs/grading.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from services.cli.tune import tune_app
from services.cli.ui import (
    console,
    fail,
    load_settings,
    out,
    progress_bar,
    task_updater,
    write_json_report,
)
from services.common.errors import RampartError, invalid
from services.evaluation.splits import QuerySplit

if TYPE_CHECKING:
    from services.evaluation.grading_tune import GradingFit


@tune_app.command("grading")
def tune_grading(
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="CORPUS::QRELS_SPLIT[::train] (repeatable; @x = <data_dir>/x). Default: HotpotQA-500's "
            "train half, SciFact train, NQ-oracle train",
        ),
    ] = None,
    queries: Annotated[int, typer.Option(min=10, max=5000, help="Judged queries per set")] = 150,
    k: Annotated[int, typer.Option(min=1, max=50, help="Correct = a relevant document in the top k")] = 5,
    precision: Annotated[
        float, typer.Option(min=0.5, max=1.0, help="Precision each of Correct / Incorrect must reach")
    ] = 0.9,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the cases' summary here")] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write the fitted evaluator here as an artifact (weights.json, manifest.json, "
            "MODEL_CARD.md) for RAMPART_GRADING__EVALUATOR_DIR",
        ),
    ] = None,
) -> None:
    """Fit the CRAG retrieval evaluator and its Correct / Incorrect thresholds on dev queries; prints
    the settings to use, and with --out writes the evaluator artifact (docs/grading.md)."""
    from services.evaluation.grading_tune import DEFAULT_SETS, save_evaluator, tune_grading

    settings = load_settings()
    try:
        with progress_bar() as bar:
            tuned = tune_grading(
                settings,
                sets or DEFAULT_SETS,
                queries=queries,
                k=k,
                precision=precision,
                progress=task_updater(bar),
            )
    except RampartError as exc:
        raise fail(exc) from exc
    out.print(_grading_table(tuned))
    console.print("settings to use (RAMPART_GRADING__<NAME>):")
    out.print(json.dumps(tuned.chosen, indent=2))
    command = "rampart " + " ".join(sys.argv[1:])
    if out_dir:
        save_evaluator(
            tuned,
            out_dir,
            settings,
            sets=sets or DEFAULT_SETS,
            queries=queries,
            k=k,
            precision=precision,
            command=command,
        )
        console.print(
            f"evaluator written to {out_dir}: set RAMPART_GRADING__EVALUATOR_DIR={out_dir} and the two "
            "thresholds above"
        )
    if json_out:
        write_json_report(json_out, {"command": command, "best": tuned.chosen, "rows": tuned.rows})


def _grading_table(tuned: GradingFit) -> Table:
    """One column per report row (the fit half, the report half tuned and as currently set, each set)."""
    rows = tuned.rows
    table = Table(
        title=f"CRAG evaluator on {len(tuned.cases)} dev cases (tuned unless said; fit / report halves)"
    )
    table.add_column("metric")
    for name in rows:
        table.add_column(name, justify="right")
    for metric in next(iter(rows.values())):
        table.add_row(metric, *(str(row[metric]) for row in rows.values()))
    return table


@tune_app.command("refinement")
def tune_refinement(
    queries: Annotated[int, typer.Option(min=10, max=250, help="HotpotQA-500 queries of the half")] = 100,
    query_half: Annotated[
        str, typer.Option(help="train (choose settings here) or heldout (report only, never choose on it)")
    ] = "train",
    depth: Annotated[int, typer.Option(min=1, max=20, help="Top results refined")] = 5,
    lexical_weights: Annotated[
        str, typer.Option(help="Comma-separated grading.lexical_weight values to try")
    ] = "0,0.25,0.5,0.75,1",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures here")] = None,
) -> None:
    """Knowledge refinement on HotpotQA-500's train half: answer-string recall and characters of the
    refined strips vs the top results they came from, per lexical weight (docs/grading.md)."""
    from services.evaluation.grading_tune import refinement_rows

    settings = load_settings()
    try:
        if query_half not in ("train", "heldout"):
            raise invalid(f"--query-half {query_half!r}: use train or heldout")
        half: QuerySplit = query_half  # type: ignore[assignment]
        grid = [float(w) for w in lexical_weights.split(",") if w.strip()]
        with progress_bar() as bar:
            n, rows = refinement_rows(
                settings,
                queries=queries,
                query_half=half,
                depth=depth,
                lexical_weights=grid,
                progress=task_updater(bar),
            )
    except RampartError as exc:
        raise fail(exc) from exc
    table = Table(title=f"knowledge refinement on {n} HotpotQA-500 {query_half}-half queries")
    for col in ("context", "answer_recall", "mean chars", "mean strips"):
        table.add_column(col, justify="right")
    for name, r in rows.items():
        table.add_row(name, f"{r['answer_recall']:.3f}", f"{r['chars']:.0f}", f"{r.get('strips', 0):.1f}")
    out.print(table)
    if json_out:
        write_json_report(json_out, {"command": "rampart " + " ".join(sys.argv[1:]), "rows": rows})
