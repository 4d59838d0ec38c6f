"""``rampart eval answers hotpotqa|nq``: answer-string recall of ``/v1/answer``'s pipeline."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from services.cli.ui import fail, load_settings, out, progress_bar, task_updater, write_json_report
from services.common.errors import RampartError
from services.evaluation.splits import QuerySplit


def eval_answers(
    name: Annotated[str, typer.Argument(help="hotpotqa (HotpotQA-500) or nq (NQ-open oracle)")],
    split: Annotated[str, typer.Option(help="heldout (report), train (tuning) or all")] = "heldout",
    limit: Annotated[int | None, typer.Option(min=1, help="First N questions only")] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write summary and per-question rows")
    ] = None,
) -> None:
    """Share of questions whose gold answer appears in the answer and in its verified context."""
    from services.evaluation.answers import run_answer_eval

    if split not in ("heldout", "train", "all"):
        raise typer.BadParameter(f"--split {split!r}: use heldout, train or all")
    query_split: QuerySplit = split  # type: ignore[assignment]
    settings = load_settings()
    try:
        with progress_bar() as bar:
            report = run_answer_eval(
                name, settings, split=query_split, limit=limit, progress=task_updater(bar)
            )
    except RampartError as exc:
        raise fail(exc) from exc
    summary = report["summary"]
    assert isinstance(summary, dict)
    table = Table("figure", "value", title=f"answers: {name} ({split})")
    for key, value in summary.items():
        table.add_row(key, f"{value:.4f}" if isinstance(value, float) else str(value))
    out.print(table)
    if json_out:
        write_json_report(json_out, report)
