"""``rampart eval router``: the query router's figures on the held-out labelled queries."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from services.cli.ui import console, fail, load_settings, out, progress_bar, task_updater, write_json_report
from services.common.errors import RampartError


def eval_router(
    data: Annotated[
        Path | None,
        typer.Option(help="Folder with hotpotqa_dev500/ and nq_open_oracle/; default <eval_data_dir>"),
    ] = None,
    model_dir: Annotated[
        Path | None, typer.Option(help="Router to measure; default the served one (<models_dir>/router)")
    ] = None,
    split: Annotated[str, typer.Option(help="heldout (the report) or train (a fit check)")] = "heldout",
    seed: Annotated[
        int | None,
        typer.Option(help="Seed of the derived follow-ups; default the one the router was trained with"),
    ] = None,
    nq_limit: Annotated[int | None, typer.Option(min=1, help="Only the first N NQ-open questions")] = None,
    latency_samples: Annotated[
        int, typer.Option(min=0, max=5000, help="Single-query classify calls timed (embedding included)")
    ] = 200,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here")] = None,
) -> None:
    """Accuracy, per-class precision/recall and confusion matrices for type and complexity on the
    held-out labelled queries (HotpotQA-500 heldout half, NQ held-out half and their follow-ups), and
    p50/p95 latency of one classify call."""
    from services.common.errors import invalid
    from services.models.router_data import load_labelled, split_rows
    from services.models.router_train import evaluate_router, measure_latency
    from services.orchestrator.routing.router import QueryRouter
    from services.retrieval.embedder import build_embedder

    settings = load_settings()
    try:
        if split not in ("train", "heldout"):
            raise invalid(f"--split {split!r}: use heldout (the report) or train")
        embedder = build_embedder(settings.embedding, settings.models_dir)
        router = QueryRouter.from_dir(
            model_dir or settings.router_model_dir(), embedder, min_confidence=settings.routing.min_confidence
        )
        manifest = router.manifest
        used_seed = seed if seed is not None else int(manifest.get("config", {}).get("seed", 13))
        rows = split_rows(
            load_labelled(data or settings.eval_data_dir, seed=used_seed, nq_limit=nq_limit),
            "train" if split == "train" else "heldout",
        )
        if not rows:
            raise invalid(f"no {split} queries in {data or settings.eval_data_dir}")
        with progress_bar() as bar:
            figures = evaluate_router(router, rows, task_updater(bar))
        figures |= measure_latency(router, rows, n=latency_samples)
    except RampartError as exc:
        raise fail(exc) from exc
    _print(figures, router.model_id, split, settings.routing.min_confidence)
    if json_out:
        report: dict[str, Any] = {
            "command": "rampart " + " ".join(sys.argv[1:]),
            "model_id": router.model_id,
            "split": split,
            "seed": used_seed,
            "min_confidence": settings.routing.min_confidence,
            **figures,
        }
        write_json_report(json_out, report)


def _print(figures: dict[str, Any], model_id: str, split: str, min_confidence: float) -> None:
    for head in ("type", "complexity"):
        d = figures[head]
        table = Table(
            title=f"{model_id}: {head} on {figures['queries']} {split} queries, accuracy {d['accuracy']}"
        )
        for col in ("class", "precision", "recall", "f1", "support"):
            table.add_column(col, justify="right")
        for name, row in d["per_class"].items():
            table.add_row(name, *(str(row[k]) for k in ("precision", "recall", "f1", "support")))
        out.print(table)
        names = list(d["confusion"])
        matrix = Table(title=f"{head} confusion (rows gold, columns predicted)")
        matrix.add_column("gold")
        for n in names:
            matrix.add_column(n, justify="right")
        for gold, row in d["confusion"].items():
            matrix.add_row(gold, *(str(row[n]) for n in names))
        out.print(matrix)
    by_kind = Table(title="type accuracy by source/kind")
    by_kind.add_column("source/kind")
    by_kind.add_column("accuracy", justify="right")
    for kind, acc in figures["type_accuracy_by_kind"].items():
        by_kind.add_row(kind, str(acc))
    out.print(by_kind)
    console.print(
        f"low-confidence fallbacks (< {min_confidence}): {figures['low_confidence_fallbacks']}; classify latency "
        f"p50 {figures['latency_ms_p50']} ms, p95 {figures['latency_ms_p95']} ms "
        f"({figures['latency_samples']} single queries, embedding included)"
    )
