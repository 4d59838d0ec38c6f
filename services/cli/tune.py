"""``rampart tune …``: fit settings on dev data (never on a test split) and print what to set."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
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
    resolve_dataset,
    task_updater,
    write_json_report,
)
from services.common.errors import RampartError, invalid

tune_app = typer.Typer(help="Tune settings on dev data.", no_args_is_help=True)
tune_app.command("routing")(tune_routing)


def _parse_set(spec: str) -> tuple[str, str, str]:
    parts = spec.split("::")
    if len(parts) not in (2, 3):
        raise invalid(f"--set {spec!r}: write CORPUS_DIR::ATTACKS_JSON or CORPUS_DIR::ATTACKS_JSON::train")
    query_split = parts[2] if len(parts) == 3 else "all"
    if query_split not in ("all", "train", "heldout"):
        raise invalid(f"--set {spec!r}: the query split must be all, train or heldout")
    return parts[0], parts[1], query_split


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
) -> None:
    """Grid-search the fact-check thresholds (near-duplicate cosine and size, strip coverage, relevance
    probability) and fit the reranker calibration, on dev attack sets; prints the settings to use."""
    from services.evaluation.attack import attack_queries, load_attacks, poisoned_runtime
    from services.evaluation.beir import available_splits, load_beir
    from services.evaluation.factcheck_tune import (
        GRID,
        cases_key,
        collect_cases,
        fit_calibration,
        grid_search,
        load_cases,
        save_cases,
    )
    from services.evaluation.splits import select_queries
    from services.orchestrator.runtime import Variant
    from services.rerank.reranker import build_reranker
    from services.retrieval.embedder import build_embedder

    settings = load_settings()
    # evidence is gathered once for the widest context window the grid tries
    # (and with the near-copies of every border the grid tries)
    widest = max([settings.factcheck.context_depth, *GRID["context_depth"]])
    borders = [b for b in [settings.factcheck.copy_border_threshold, *GRID["copy_border_threshold"]] if b > 0]
    gather = {
        "context_depth": widest,
        "copy_min_docs": max([settings.factcheck.copy_min_docs, *GRID["copy_min_docs"]]),
        "copy_border_threshold": min(borders, default=0.0),
    }
    wide = settings.model_copy(update={"factcheck": settings.factcheck.model_copy(update=gather)})
    try:
        embedder = build_embedder(settings)
        reranker = build_reranker(settings) if settings.rerank.enabled else None  # one for every set
        # retrieval and reranking as served; the fact-check's evidence is gathered by collect_cases
        variant = Variant(rerank=reranker is not None, factcheck=False, rerank_cache=200_000)
        key = cases_key({"sets": sets, "clean_queries": clean_queries, "k": k}, wide)
        cached = load_cases(cases_file, key) if cases_file else None
        if cached is not None:
            console.print(f"reusing {len(cached)} collected queries from {cases_file}")
        cases = cached or []
        with progress_bar() as bar:
            progress = task_updater(bar)
            for spec in [] if cached is not None else sets:
                corpus, attacks_path, query_split = _parse_set(spec)
                root = resolve_dataset(Path(corpus), settings)
                splits = available_splits(root)
                if len(splits) != 1 and query_split != "train":
                    raise invalid(f"{root} has qrels splits {splits}: tune on one split only, or on ::train")
                dataset = load_beir(root, splits[0])
                attacks = load_attacks(Path(attacks_path))
                if query_split != "all":
                    keep = set(select_queries([a.qid for a in attacks] + list(dataset.queries), query_split))  # type: ignore[arg-type]
                    attacks = [a for a in attacks if a.qid in keep]
                    dataset = replace(
                        dataset, queries={q: t for q, t in dataset.queries.items() if q in keep}
                    )
                cache = settings.data_dir / "eval-cache"
                with poisoned_runtime(
                    dataset,
                    attacks,
                    settings,
                    cache,
                    embedder=embedder,
                    reranker=reranker,
                    variant=variant,
                    progress=progress,
                ) as runtime:
                    queries = attack_queries(dataset, attacks, clean_queries)
                    cases += collect_cases(
                        queries,
                        runtime.search.retriever,
                        runtime.search.rerank,
                        embedder,
                        wide,
                        k=k,
                        progress=progress,
                    )
        if cases_file and cached is None:
            save_cases(cases_file, key, cases)
        calibration = fit_calibration(cases, settings.factcheck.depth)
        tuned = settings.model_copy(
            update={"factcheck": settings.factcheck.model_copy(update={"calibration": calibration})}
        )
        best, rows = grid_search(
            cases,
            tuned,
            k=k,
            max_recall_loss=max_recall_loss,
            max_attacked_recall_loss=max_attacked_recall_loss,
        )
    except RampartError as exc:
        raise fail(exc) from exc
    rows.sort(key=lambda r: (r["poison_in_context"], r["clean_recall_loss"]))
    table = Table(title=f"fact-check grid on {len(cases)} dev queries (best 12 of {len(rows)})")
    for col in rows[0]:
        table.add_column(col, justify="right")
    for r in rows[:12]:
        table.add_row(*(str(v) for v in r.values()))
    out.print(table)
    chosen: dict[str, Any] = {**best, "calibration": list(calibration)}
    console.print("settings to use (RAMPART_FACTCHECK__<NAME>):")
    out.print(json.dumps(chosen, indent=2))
    if json_out:
        report = {"command": "rampart " + " ".join(sys.argv[1:]), "best": chosen, "grid": rows}
        write_json_report(json_out, report)


import services.cli.tune_grading  # noqa: E402, F401  (registers `tune grading` and `tune refinement`)
