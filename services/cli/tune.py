"""``rampart tune …``: fit settings on dev data (never on a test split) and print what to set."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from services.cli.tune_routing import tune_routing
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

tune_app = typer.Typer(help="Tune settings on dev data.", no_args_is_help=True)
tune_app.command("routing")(tune_routing)


@tune_app.command("factcheck")
def tune_factcheck(
    sets: Annotated[
        list[str],
        typer.Option(
            "--set",
            help="CORPUS_DIR::ATTACKS_JSON[::train|heldout] (repeatable). The qrels split used is the "
            "corpus' only one; a corpus with a test split must be limited to its train query half",
        ),
    ],
    clean_queries: Annotated[int, typer.Option(min=0, help="Clean queries per set")] = 300,
    max_recall_loss: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="Clean Recall@10 the defence may cost (0.01 = 1 point)")
    ] = 0.01,
    max_attacked_recall_loss: Annotated[
        float,
        typer.Option(
            min=0.0, max=1.0, help="Recall@10 of the attacked questions' genuine evidence it may cost"
        ),
    ] = 0.05,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write every grid point here")] = None,
    k: Annotated[int, typer.Option(min=1, max=100, help="Recall@k and poison-in-top-k depth")] = 10,
    cases_file: Annotated[
        Path | None,
        typer.Option(
            "--cases",
            help="Keep the collected per-query evidence here and reuse it while sets, models and settings "
            "are unchanged (a pickle: only ever a file your own run wrote)",
        ),
    ] = None,
    out_dir: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="Write the fitted values here as a policy artifact (policy.json, manifest.json, "
            "MODEL_CARD.md) for RAMPART_FACTCHECK__POLICY_DIR",
        ),
    ] = None,
) -> None:
    """Grid-search the fact-check thresholds (near-duplicate cosine and size, strip coverage, relevance
    probability) and fit the reranker calibration, on dev attack sets; prints the settings to use, and
    with --out writes the policy artifact (docs/factcheck.md)."""
    from services.evaluation.factcheck_tune import save_policy
    from services.evaluation.factcheck_tune import tune_factcheck as grid_search

    settings = load_settings()
    try:
        with progress_bar() as bar:
            tuned = grid_search(
                settings,
                sets,
                clean_queries=clean_queries,
                k=k,
                max_recall_loss=max_recall_loss,
                max_attacked_recall_loss=max_attacked_recall_loss,
                cases_file=cases_file,
                say=console.print,
                progress=task_updater(bar),
            )
    except RampartError as exc:
        raise fail(exc) from exc
    rows = tuned.rows
    rows.sort(key=lambda r: (r["poison_in_context"], r["clean_recall_loss"]))
    out.print(_grid_table(rows, len(tuned.cases)))
    chosen: dict[str, Any] = {**tuned.best, "calibration": list(tuned.calibration)}
    console.print("settings to use (RAMPART_FACTCHECK__<NAME>):")
    out.print(json.dumps(chosen, indent=2))
    command = "rampart " + " ".join(sys.argv[1:])
    if out_dir:
        save_policy(tuned, out_dir, command=command)
        console.print(f"policy written to {out_dir}: to use it, set RAMPART_FACTCHECK__POLICY_DIR={out_dir}")
    if json_out:
        report = {"command": command, "best": chosen, "grid": rows}
        write_json_report(json_out, report)


def _grid_table(rows: list[dict[str, Any]], cases: int) -> Table:
    """The best 12 grid points (``rows`` sorted best first)."""
    table = Table(title=f"fact-check grid on {cases} dev queries (best 12 of {len(rows)})")
    for col in rows[0]:
        table.add_column(col, justify="right")
    for r in rows[:12]:
        table.add_row(*(str(v) for v in r.values()))
    return table


import services.cli.tune_grading  # noqa: E402, F401  (registers `tune grading` and `tune refinement`)
