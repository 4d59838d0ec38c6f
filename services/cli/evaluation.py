"""``rampart eval …``: quality figures. ``rampart eval DATA_DIR`` (retrieval metrics, defined in
main.py) stays the default subcommand so existing commands keep working; ``rampart eval attack``
measures corruption resistance."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from typer import _click  # typer 0.29 vendors click; its Context is this one
from typer.core import TyperGroup

from services.cli.eval_answers import eval_answers
from services.cli.eval_general import eval_general
from services.cli.eval_rerank_domains import eval_rerank_domains
from services.cli.eval_router import eval_router
from services.cli.ui import (
    console,
    fail,
    load_settings,
    out,
    progress_bar,
    task_updater,
    write_json_report,
)
from services.common.config import CorpusProfile
from services.common.errors import RampartError
from services.evaluation.beir import resolve_dataset


class DefaultSubcommand(TyperGroup):
    """A group whose first argument, when it names no subcommand, goes to ``retrieval``."""

    default = "retrieval"

    def parse_args(self, ctx: _click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [self.default, *args]
        return super().parse_args(ctx, args)


PROFILE_OPTION = typer.Option(
    "--profile",
    help="Corpus profile of the evaluation tenant: generic or linked (default: the settings'; "
    "docs/corpus-profiles.md)",
)
"""``--profile`` of ``rampart eval`` and ``rampart eval attack``: what the figures are measured under."""

eval_app = typer.Typer(
    cls=DefaultSubcommand,
    help="Quality figures: `rampart eval DATA_DIR` (retrieval, the default), `rampart eval attack` and `rampart eval claims`.",
    no_args_is_help=True,
)


eval_app.command("answers")(eval_answers)
eval_app.command("general")(eval_general)
eval_app.command("rerank-domains")(eval_rerank_domains)
eval_app.command("router")(eval_router)


@eval_app.command("attack")
def attack(
    corpus_dir: Annotated[Path, typer.Argument(help="A BEIR folder (or a name under RAMPART_EVAL_DATA_DIR)")],
    attacks_json: Annotated[
        Path,
        typer.Argument(
            help="PoisonedRAG JSON: {id: {question, correct answer, incorrect answer, adv_texts}}"
        ),
    ],
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here")] = None,
    split: Annotated[str, typer.Option(help="qrels split of the clean queries")] = "test",
    query_split: Annotated[
        str, typer.Option(help="all, or train/heldout: the fixed halves of a single-split set (HotpotQA-500)")
    ] = "all",
    k: Annotated[int, typer.Option(min=1, max=100, help="First-stage top-k inspected for poison")] = 10,
    clean_queries: Annotated[
        int | None, typer.Option(min=0, help="Clean queries scored (default: all judged, unattacked ones)")
    ] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Index cache (default <data_dir setting>/eval-cache)")
    ] = None,
    routed: Annotated[
        bool, typer.Option(help="Also run the questions through the adaptive pipeline (/v1/answer's)")
    ] = True,
    profile: Annotated[CorpusProfile | None, PROFILE_OPTION] = None,
) -> None:
    """Plant each question's adversarial passages as ordinary documents; report the share of attacked
    questions with poison in the top-k, the reranked top-M and the final context, clean Recall@10 with
    and without fact-check, the latency it adds and the classifier's detection precision/recall; and
    (--routed) poison and Recall@10 in the adaptive pipeline's final top-k."""
    from services.evaluation.attack import attack_half, load_attacks, measure_attack
    from services.evaluation.beir import load_beir
    from services.evaluation.runner import EVAL_TENANT, with_profile
    from services.retrieval.embedder import build_embedder

    settings = with_profile(load_settings(), profile)
    if query_split not in ("all", "train", "heldout"):
        raise typer.BadParameter(f"--query-split {query_split!r}: use all, train or heldout")
    if settings.factcheck.backend == "none":
        raise typer.BadParameter("factcheck.backend is none; nothing to measure")
    try:
        dataset = load_beir(resolve_dataset(corpus_dir, settings), split)
        dataset, attacks = attack_half(dataset, load_attacks(attacks_json), query_split)  # type: ignore[arg-type]
        embedder = build_embedder(settings.embedding, settings.models_dir)
        with progress_bar() as bar:
            run = measure_attack(
                dataset,
                attacks,
                settings,
                cache_dir or settings.data_dir / "eval-cache",
                embedder=embedder,
                k=k,
                clean_limit=clean_queries,
                routed=routed,
                progress=task_updater(bar),
            )
    except RampartError as exc:
        raise fail(exc) from exc
    figures = run.figures
    report: dict[str, Any] = {
        "command": "rampart " + " ".join(sys.argv[1:]),
        "corpus": dataset.name,
        "attacks": str(attacks_json),
        "query_split": query_split,
        "corpus_profile": settings.corpus.of(EVAL_TENANT).value,
        "reranker": run.reranker,
        "fact_checker": run.fact_checker,
        "factcheck": settings.factcheck.model_dump(mode="json", exclude={"celery"}),
        **figures,
    }
    _print_attack(figures, title=f"attack: {attacks_json.name} on {dataset.name}")
    if json_out:
        write_json_report(json_out, report)


ATTACK_FIGURES = (
    "poison_in_topk",
    "poison_in_reranked",
    "poison_in_context",
    "clean_recall@10_without_factcheck",
    "clean_recall@10_with_factcheck",
    "attacked_recall@10_without_factcheck",
    "attacked_recall@10_with_factcheck",
    "added_latency_ms_p50",
    "added_latency_ms_p95",
    "routed_poison_in_context",
    "routed_clean_recall@10",
    "routed_attacked_recall@10",
)
"""The figures ``rampart eval attack`` shows, in this order (the routed ones only with --routed)."""


def _print_attack(figures: dict[str, Any], *, title: str) -> None:
    """The headline figures, then the detection precision / recall per class; and how many queries
    ran degraded, since their figures count a skipped stage."""
    table = Table(title=f"{title} ({figures['attacked_questions']} questions)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key in ATTACK_FIGURES:
        if key in figures:
            table.add_row(key, str(figures[key]))
    for name, d in figures["detection"].items():
        table.add_row(f"{name} precision / recall", f"{d['precision']} / {d['recall']}")
    out.print(table)
    if figures["degraded_queries"] or figures.get("routed_degraded_queries"):
        routed_degraded = figures.get("routed_degraded_queries", 0)
        console.print(
            f"[yellow]{figures['degraded_queries']} queries ran degraded ({routed_degraded} through the "
            "adaptive pipeline)[/yellow]"
        )


@eval_app.command("claims")
def claims(
    claims_dir: Annotated[
        Path, typer.Argument(help="The scifact_claims folder: claims_<split>.jsonl and corpus.jsonl")
    ],
    split: Annotated[str, typer.Option(help="train or dev (test labels are not public)")] = "dev",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here")] = None,
) -> None:
    """Judge each claim's cited (and evidence) abstracts with the configured fact-checker, one check
    per claim, and report the confusion of gold SUPPORT / CONTRADICT / NEI against the verdicts, the
    precision/recall of RELEVANT (SUPPORT) and COUNTERFACTUAL (CONTRADICT) and the latency per check."""
    from services.evaluation.claims import CONTRADICT, GOLD_CLASSES, NEI, SUPPORT, load_claims, run_claims
    from services.factcheck.checker import build_fact_checker
    from services.retrieval.embedder import build_embedder

    settings = load_settings()
    try:
        cases = load_claims(resolve_dataset(claims_dir, settings), split)
        checker = build_fact_checker(
            settings.factcheck,
            build_embedder(settings.embedding, settings.models_dir),
            llm=settings.llm,
            models_dir=settings.models_dir,
        )
        if checker is None:
            raise typer.BadParameter("factcheck.backend is none; nothing to measure")
        try:
            with progress_bar() as bar:
                figures = run_claims(cases, checker, deadline_s=60.0, progress=task_updater(bar))
        finally:
            checker.close()
    except RampartError as exc:
        raise fail(exc) from exc
    report: dict[str, Any] = {
        "command": "rampart " + " ".join(sys.argv[1:]),
        "claims_dir": str(claims_dir),
        "split": split,
        "fact_checker": checker.model_id,
        "factcheck": settings.factcheck.model_dump(mode="json", exclude={"celery"}),
        **figures,
    }
    matrix = Table(title=f"claims: {claims_dir.name} {split} ({figures['claims']} claims, gold × verdict)")
    matrix.add_column("gold")
    verdicts = list(figures["confusion"][SUPPORT])
    for v in verdicts:
        matrix.add_column(v, justify="right")
    matrix.add_column("total", justify="right")
    for g in GOLD_CLASSES:
        row = figures["confusion"][g]
        matrix.add_row(g, *(str(row[v]) for v in verdicts), str(figures["gold_counts"][g]))
    out.print(matrix)
    table = Table(title="fact-check on claims")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, gold in (("relevant", SUPPORT), ("counterfactual", CONTRADICT)):
        d = figures[name]
        table.add_row(f"{name} precision", f"{d['precision']} ({d['true_positives']}/{d['predicted']})")
        table.add_row(f"{name} recall ({gold})", f"{d['recall']} ({d['true_positives']}/{d['positives']})")
    for key in ("checks", "documents_scored", "skipped_ties", "latency_ms_p50", "latency_ms_p95"):
        table.add_row(key, str(figures[key]))
    table.add_row(f"{NEI} documents (confusion only)", str(figures["gold_counts"][NEI]))
    out.print(table)
    if figures["degraded_checks"]:
        console.print(f"[yellow]{figures['degraded_checks']} checks ran unverified (not scored)[/yellow]")
    if json_out:
        write_json_report(json_out, report)
