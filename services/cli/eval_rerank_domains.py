"""``rampart eval rerank-domains``: the reranker's nDCG@10 gain on each kind of corpus (issue 38)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from services.cli.ui import fail, load_settings, out, progress_bar, task_updater, write_json_report
from services.common.errors import RampartError


def eval_rerank_domains(
    data: Annotated[
        Path | None,
        typer.Option(help="Folder holding the dev data (default <eval_data_dir>, ../shared/data)"),
    ] = None,
    domains: Annotated[
        str | None,
        typer.Option(
            help="Comma-separated: scifact, hotpotqa, nq-oracle, 2wikimultihopqa, classic (default all)"
        ),
    ] = None,
    model_dir: Annotated[
        Path | None,
        typer.Option(
            help="The reranker to measure (an exported folder; default the served one, rerank.model_dir)"
        ),
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write every domain's figures here")] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Index cache (default <data_dir setting>/eval-cache)")
    ] = None,
) -> None:
    """nDCG@10 per domain of the first stage, the first stage blended with the cross-encoder (as served)
    and the cross-encoder's order, on queries no training recipe uses; the worst fused gain last (the
    figure a recipe is chosen on, leaving each domain out of its training: docs/reranking.md)."""
    from services.evaluation.general import Harness
    from services.evaluation.rerank_domains import run_domains, select_domains
    from services.rerank.reranker import build_reranker
    from services.retrieval.embedder import build_embedder

    settings = load_settings()
    if model_dir is not None:
        settings = settings.model_copy(
            update={"rerank": settings.rerank.model_copy(update={"model_dir": model_dir, "enabled": True})}
        )
    try:
        chosen = select_domains(domains)
        reranker = build_reranker(settings.rerank, settings.models_dir)
        with progress_bar() as bar:
            h = Harness(
                settings=settings,
                data_root=data or settings.eval_data_dir,
                cache_root=cache_dir or settings.data_dir / "eval-cache",
                embedder=build_embedder(settings.embedding, settings.models_dir),
                reranker=reranker,
                progress=task_updater(bar),
            )
            model = {
                "model_id": reranker.model_id if reranker is not None else None,
                "dir": str(settings.reranker_model_dir()),
            }
            report = run_domains(chosen, h, model)
    except RampartError as exc:
        raise fail(exc) from exc
    report["command"] = "rampart " + " ".join(sys.argv[1:])
    print_domains(report)
    if json_out:
        write_json_report(json_out, report)


def print_domains(report: dict[str, Any]) -> None:
    table = Table(title=f"rerank per domain: {report['model']['model_id']} (nDCG@10)")
    for col in ("domain", "queries", "first stage", "+rerank fused", "gain", "rerank alone", "gain"):
        table.add_column(col, justify="left" if col == "domain" else "right")
    for r in report["rows"]:
        table.add_row(
            r["domain"],
            str(r["queries"]),
            f"{r['first_stage']:.4f}",
            f"{r['fused']:.4f}",
            f"{r['gain_fused']:+.4f}",
            f"{r['pure']:.4f}",
            f"{r['gain_pure']:+.4f}",
        )
    out.print(table)
    worst = report["worst_gain_fused"]
    out.print(f"worst fused gain: {worst['value']:+.4f} ({worst['domain']})")
