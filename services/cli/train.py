"""``rampart train …``: build Rampart's own models from training splits (needs the [build] extra)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from services.cli.ui import (
    console,
    fail,
    invocation,
    load_settings,
    out,
    progress_bar,
    split_csv,
    task_updater,
    write_json_report,
)
from services.common.errors import RampartError
from services.common.settings import RampartSettings

if TYPE_CHECKING:
    from services.models.pair_train import PairExample
    from services.rerank.reranker import Reranker

train_app = typer.Typer(help="Train Rampart's models from the training splits in RAMPART_EVAL_DATA_DIR.")


@train_app.command("reranker")
def train_reranker_cmd(  # long: 23 options, 16 of them TrainConfig's; the body builds it and trains
    ctx: typer.Context,
    out_dir: Annotated[Path, typer.Option("--out", help="Work folder: checkpoint/, hf/, onnx/")] = Path(
        ".rampart/train/reranker"
    ),
    sources: Annotated[
        str,
        typer.Option(help="Training sources: scifact, hotpotqa, nq, twowiki, classic (docs/reranking.md)"),
    ] = "scifact,hotpotqa,nq",
    max_steps: Annotated[
        int, typer.Option(min=1, help="Optimiser steps (the LR schedule spans these)")
    ] = 1400,
    max_minutes: Annotated[float, typer.Option(min=0.1, help="Wall-clock bound; stops early")] = 50.0,
    max_length: Annotated[int, typer.Option(min=16, max=512, help="Tokens per (query, chunk) pair")] = 160,
    groups_per_step: Annotated[int, typer.Option(min=1, help="Queries per step")] = 8,
    negatives: Annotated[int, typer.Option(min=1, help="Hard negatives per query")] = 3,
    lr: Annotated[float, typer.Option(help="Peak learning rate")] = 3e-5,
    seed: Annotated[int, typer.Option(help="Seed for data order, sampling and the head")] = 13,
    groups_per_source: Annotated[
        int | None, typer.Option(min=1, help="Use only this many queries per source (smoke runs)")
    ] = None,
    val_fraction: Annotated[
        float, typer.Option(min=0.0, max=0.5, help="Share of queries held out for validation (by hash)")
    ] = 0.05,
    checkpoint_every: Annotated[int, typer.Option(min=1, help="Steps between checkpoints")] = 50,
    prior_weight: Annotated[
        float | None,
        typer.Option(help="Residual training: learn logit + w*first-stage score, w starting here (e.g. 4)"),
    ] = None,
    zero_head: Annotated[
        bool, typer.Option(help="Start the head at zero (a residual model then starts at the first stage)")
    ] = False,
    base: Annotated[
        Path | None, typer.Option(help="Start from this HF folder (default: the packaged MiniLM-L6)")
    ] = None,
    architecture: Annotated[
        str,
        typer.Option(
            help="split: starts as the bi-encoder (lower layers read query and passage apart, score = "
            "cosine at first); cls: classic head on [CLS] (what Hugging Face cross-encoders are)"
        ),
    ] = "split",
    split_layers: Annotated[
        int, typer.Option(min=0, max=6, help="split: layers that read query and passage apart")
    ] = 5,
    num_layers: Annotated[
        int | None,
        typer.Option(min=1, max=6, help="Keep only the first N encoder layers (faster, shallower)"),
    ] = None,
    hotpotqa_half: Annotated[
        str,
        typer.Option(
            help="HotpotQA-500 half trained on: train, or heldout for a cross-fitted model whose train-half "
            "scores are out-of-fold (to fit `rampart train pairs --reranker-dir`; never serve it)"
        ),
    ] = "train",
    domain_halves: Annotated[
        bool,
        typer.Option(
            help="Train SciFact and NQ on the train half of their queries only, so `rampart eval "
            "rerank-domains` reports every domain on queries the model never saw (issue 38's recipes)"
        ),
    ] = False,
    model_id: Annotated[str, typer.Option(help="Name recorded in the manifest")] = "rampart-minilm-l6-ce",
    variants: Annotated[str, typer.Option(help="ONNX variants to export: fp32,int8")] = "fp32,int8",
    install: Annotated[
        bool, typer.Option(help="Install the result as the served reranker (<models_dir>/reranker)")
    ] = False,
) -> None:
    """Mine hard negatives with the hybrid retriever, fine-tune MiniLM-L6 as a cross-encoder, export to ONNX.

    Resumes from OUT/checkpoint if present (same settings). Writes OUT/onnx/ with the model card.
    """
    from services.models.reranker_pipeline import install as install_model
    from services.models.reranker_pipeline import packaged_encoder, train_reranker
    from services.models.reranker_train import TrainConfig
    from services.retrieval.embedder import build_embedder

    if hotpotqa_half not in ("train", "heldout"):
        raise typer.BadParameter(f"--hotpotqa-half {hotpotqa_half!r}: use train or heldout")
    if hotpotqa_half == "heldout" and install:
        raise typer.BadParameter(
            "--hotpotqa-half heldout trains a cross-fitted reranker for fitting stacked models; it must not "
            "be served (held-out figures would be measured on its training questions): drop --install"
        )
    settings = load_settings()
    cfg = TrainConfig(
        base=str(base or packaged_encoder()),
        out_dir=out_dir,
        max_steps=max_steps,
        max_minutes=max_minutes,
        groups_per_step=groups_per_step,
        negatives=negatives,
        max_length=max_length,
        lr=lr,
        seed=seed,
        checkpoint_every=checkpoint_every,
        val_fraction=val_fraction,
        num_layers=num_layers,
        architecture=architecture,
        split_layers=split_layers,
        prior_weight=prior_weight,
        zero_head=zero_head,
    )
    try:
        embedder = build_embedder(settings.embedding, settings.models_dir)
        with progress_bar() as bar:
            onnx_dir = train_reranker(
                settings,
                embedder,
                cfg,
                sources=split_csv(sources),
                model_id=model_id,
                command=invocation(ctx),
                variants=tuple(split_csv(variants)),
                groups_per_source=groups_per_source,
                hotpotqa_half=hotpotqa_half,  # type: ignore[arg-type]
                domain_halves=domain_halves,
                say=lambda m: console.print(f"• {m}"),
                progress=task_updater(bar),
            )
        if install:
            dest = install_model(onnx_dir, settings.reranker_model_dir())
            console.print(f"[green]installed[/green] {dest}")
    except RampartError as exc:
        raise fail(exc) from exc
    console.print(f"[green]done[/green] {onnx_dir} (model card: {onnx_dir / 'MODEL_CARD.md'})")


@train_app.command("reranker-lodo")
def train_reranker_lodo_cmd(
    ctx: typer.Context,
    out_dir: Annotated[Path, typer.Option("--out", help="Work folder: one <domain>/ per fold")] = Path(
        ".rampart/train/reranker-lodo"
    ),
    domains: Annotated[
        str | None, typer.Option(help="Held-out domains, comma-separated (default: all five)")
    ] = None,
    max_steps: Annotated[int, typer.Option(min=1, help="Optimiser steps per fold")] = 300,
    max_minutes: Annotated[float, typer.Option(min=0.1, help="Wall-clock bound per fold")] = 20.0,
    max_length: Annotated[int, typer.Option(min=16, max=512, help="Tokens per (query, chunk) pair")] = 160,
    seed: Annotated[int, typer.Option(help="Seed for data order, sampling and the head")] = 13,
    architecture: Annotated[str, typer.Option(help="split or cls (see `rampart train reranker`)")] = "split",
    split_layers: Annotated[int, typer.Option(min=0, max=6, help="split: layers reading apart")] = 5,
    num_layers: Annotated[
        int | None, typer.Option(min=1, max=6, help="Keep only the first N encoder layers")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the folds' figures here")] = None,
) -> None:
    """Leave one domain out: per domain, train the recipe on the other four (their train halves) and
    score it on the one left out (`rampart eval rerank-domains`); the recipe's figure is its worst fused
    gain. A fold whose model exists under --out is scored again, not retrained (delete it to retrain)."""
    from services.evaluation.general import Harness
    from services.evaluation.rerank_domains import DOMAIN_NAMES, select_domains
    from services.models.reranker_lodo import run_lodo
    from services.models.reranker_pipeline import packaged_encoder
    from services.models.reranker_train import TrainConfig
    from services.retrieval.embedder import build_embedder

    settings = load_settings()
    cfg = TrainConfig(
        base=str(packaged_encoder()),
        out_dir=out_dir,
        max_steps=max_steps,
        max_minutes=max_minutes,
        max_length=max_length,
        seed=seed,
        architecture=architecture,
        split_layers=split_layers,
        num_layers=num_layers,
    )
    try:
        chosen = [d.name for d in select_domains(domains)] if domains else list(DOMAIN_NAMES)
        embedder = build_embedder(settings.embedding, settings.models_dir)
        with progress_bar() as bar:
            updater = task_updater(bar)

            def harness(reranker: Reranker | None) -> Harness:
                return Harness(
                    settings=settings,
                    data_root=settings.eval_data_dir,
                    cache_root=settings.data_dir / "eval-cache",
                    embedder=embedder,
                    reranker=reranker,
                    progress=updater,
                )

            report = run_lodo(
                settings,
                embedder,
                cfg,
                harness,
                domains=chosen,
                command=invocation(ctx),
                say=lambda m: bar.console.print(f"• {m}"),
                progress=updater,
            )
    except RampartError as exc:
        raise fail(exc) from exc
    report["command"] = invocation(ctx)
    for row in report["rows"]:
        out.print(
            f"{row['domain']:>16}: first stage {row['first_stage']:.4f}, fused {row['fused']:.4f} "
            f"({row['gain_fused']:+.4f}), alone {row['pure']:.4f}; trained on {', '.join(row['trained_on'])}"
        )
    worst = report["worst_gain_fused"]
    out.print(f"worst held-out fused gain: {worst['value']:+.4f} ({worst['domain']})")
    if json_out:
        write_json_report(json_out, report)


@train_app.command("contradiction")
def train_contradiction_cmd(  # long: 19 options, 11 of them NliTrainConfig's; the body builds it and trains
    ctx: typer.Context,
    data: Annotated[
        Path | None,
        typer.Option(
            help="SciFact claims folder (claims_train/dev.jsonl, corpus.jsonl); default <eval_data_dir>/scifact_claims"
        ),
    ] = None,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Work folder: checkpoint/, best/, hf/, onnx/")
    ] = Path(".rampart/train/contradiction"),
    head: Annotated[
        str, typer.Option(help="mean: linear head on the mean-pooled pair; cls: Hugging Face head on [CLS]")
    ] = "mean",
    epochs: Annotated[
        int, typer.Option(min=1, help="Passes over the training pairs (the LR schedule spans them)")
    ] = 6,
    max_minutes: Annotated[
        float, typer.Option(min=0.1, help="Wall-clock bound on training; stops early")
    ] = 35.0,
    batch_size: Annotated[int, typer.Option(min=1, help="Pairs per optimiser step")] = 16,
    max_length: Annotated[int, typer.Option(min=16, max=512, help="Tokens per (evidence, claim) pair")] = 256,
    lr: Annotated[float, typer.Option(help="Peak learning rate of the encoder")] = 4e-5,
    head_lr: Annotated[float, typer.Option(help="Learning rate of the new head")] = 1e-3,
    seed: Annotated[int, typer.Option(help="Seed for data order and the head")] = 13,
    data_seed: Annotated[int, typer.Option(help="Seed for NEI picks and synthetic edits")] = 0,
    synthetic: Annotated[
        bool, typer.Option(help="Add synthetic contradictions (number/negation/entity)")
    ] = True,
    per_kind_limit: Annotated[
        int | None, typer.Option(min=0, help="At most this many synthetic pairs per kind (seeded sample)")
    ] = 150,
    limit: Annotated[
        int | None, typer.Option(min=1, help="Use only the first N training and dev pairs (smoke runs)")
    ] = None,
    checkpoint_every: Annotated[int, typer.Option(min=1, help="Steps between checkpoints")] = 50,
    bf16: Annotated[bool, typer.Option(help="bf16 autocast on CPU (~3x faster here)")] = True,
    model_id: Annotated[str, typer.Option(help="Name recorded in the manifest")] = "rampart-minilm-l6-nli",
    variants: Annotated[str, typer.Option(help="ONNX variants to export: fp32,int8")] = "fp32,int8",
    install: Annotated[
        bool,
        typer.Option(help="Install the result as the served classifier (<models_dir>/contradiction)"),
    ] = False,
) -> None:
    """Fine-tune MiniLM-L6 as a SUPPORT / CONTRADICT / NEI classifier on SciFact claims, export to ONNX.

    Validates on SciFact claims dev after every epoch and keeps the best; resumes from OUT/checkpoint if
    present (same settings). Writes OUT/onnx/ with the model card.
    """
    from services.models.contradiction_pipeline import train_contradiction
    from services.models.contradiction_train import NliTrainConfig
    from services.models.reranker_pipeline import install as install_model
    from services.models.reranker_pipeline import packaged_encoder

    settings = load_settings()
    cfg = NliTrainConfig(
        base=str(packaged_encoder()),
        out_dir=out_dir,
        epochs=epochs,
        max_minutes=max_minutes,
        batch_size=batch_size,
        max_length=max_length,
        lr=lr,
        head_lr=head_lr,
        seed=seed,
        head=head,
        checkpoint_every=checkpoint_every,
        bf16=bf16,
    )
    try:
        with progress_bar() as bar:
            onnx_dir = train_contradiction(
                data or settings.eval_data_dir / "scifact_claims",
                cfg,
                model_id=model_id,
                command=invocation(ctx),
                data_seed=data_seed,
                synthetic=synthetic,
                per_kind_limit=per_kind_limit,
                limit=limit,
                variants=tuple(split_csv(variants)),
                say=lambda m: console.print(f"• {m}"),
                progress=task_updater(bar),
            )
        if install:
            dest = install_model(onnx_dir, settings.contradiction_model_dir())
            console.print(f"[green]installed[/green] {dest}")
    except RampartError as exc:
        raise fail(exc) from exc
    console.print(f"[green]done[/green] {onnx_dir} (model card: {onnx_dir / 'MODEL_CARD.md'})")


@train_app.command("router")
def train_router_cmd(
    ctx: typer.Context,
    data: Annotated[
        Path | None,
        typer.Option(help="Folder with hotpotqa_dev500/ and nq_open_oracle/; default <eval_data_dir>"),
    ] = None,
    out_dir: Annotated[
        Path, typer.Option("--out", help="Where weights.npz, manifest.json and MODEL_CARD.md go")
    ] = Path(".rampart/train/router"),
    c: Annotated[float, typer.Option(min=1e-4, help="Inverse L2 strength of both heads")] = 1.0,
    embedding_scale: Annotated[
        float, typer.Option(min=0.01, help="Factor on the unit-norm query embedding")
    ] = 4.0,
    seed: Annotated[int, typer.Option(help="Seed for the derived follow-ups and the solver")] = 13,
    nq_limit: Annotated[
        int | None, typer.Option(min=1, help="Use only the first N NQ-open questions (smoke runs)")
    ] = None,
    model_id: Annotated[str, typer.Option(help="Name recorded in the manifest")] = "rampart-router-lr",
    install: Annotated[
        bool, typer.Option(help="Install the result as the served router (<models_dir>/router)")
    ] = False,
) -> None:
    """Build labelled queries from HotpotQA-500 (train half) and NQ-open, fit the type and complexity
    heads, measure them on the held-out half. Seconds of fitting; embedding the queries takes ~1 min."""
    from services.models.router_train import RouterTrainConfig, install_router, train_router
    from services.retrieval.embedder import build_embedder

    settings = load_settings()
    cfg = RouterTrainConfig(c=c, embedding_scale=embedding_scale, seed=seed)
    try:
        embedder = build_embedder(settings.embedding, settings.models_dir)
        with progress_bar() as bar:
            model_dir = train_router(
                data or settings.eval_data_dir,
                embedder,
                out_dir,
                cfg,
                model_id=model_id,
                command=invocation(ctx),
                min_confidence=settings.routing.min_confidence,
                nq_limit=nq_limit,
                say=lambda m: console.print(f"• {m}"),
                progress=task_updater(bar),
            )
        if install:
            dest = install_router(model_dir, settings.router_model_dir())
            console.print(f"[green]installed[/green] {dest}")
    except RampartError as exc:
        raise fail(exc) from exc
    console.print(f"[green]done[/green] {model_dir} (model card: {model_dir / 'MODEL_CARD.md'})")


@train_app.command("pairs")
def train_pairs_cmd(
    ctx: typer.Context,
    data: Annotated[
        Path, typer.Option(help="A BEIR folder with qrels, or a name under RAMPART_EVAL_DATA_DIR")
    ] = Path("hotpotqa_dev500"),
    split: Annotated[str, typer.Option(help="qrels split to read")] = "test",
    query_split: Annotated[
        str, typer.Option(help="train (default; the held-out half is for evaluation) or all")
    ] = "train",
    out_dir: Annotated[Path, typer.Option("--out", help="Where weights.json and MODEL_CARD.md go")] = Path(
        ".rampart/train/pairs"
    ),
    lam: Annotated[float, typer.Option(min=0.0, help="L2 penalty of the fitted model")] = 10.0,
    cv_lams: Annotated[str, typer.Option(help="Penalties cross-validated for the model card")] = "1,10,30",
    folds: Annotated[int, typer.Option(min=2, max=20, help="Cross-validation folds")] = 5,
    seed: Annotated[int, typer.Option(help="Seed of the fold assignment")] = 13,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Index cache (default <data_dir setting>/eval-cache)")
    ] = None,
    reranker_dir: Annotated[
        Path | None,
        typer.Option(
            help="Run the pipeline with this reranker (an ONNX folder) instead of the served one: a "
            "cross-fitted one (`rampart train reranker --hotpotqa-half heldout`) gives out-of-fold scores"
        ),
    ] = None,
    model_id: Annotated[str, typer.Option(help="Name recorded in weights.json")] = "rampart-pairs-cl",
) -> None:
    """Fit the evidence-pair model on what the routed pipeline verifies for the training questions
    (docs/chain.md "Evidence pairs"); serve it with RAMPART_CHAIN__PAIR_MODEL_DIR=<out>. About as long
    as `rampart eval … --pipelines routed` on the same questions (~5 min for HotpotQA's train half)."""
    from services.evaluation.beir import load_beir, resolve_dataset
    from services.evaluation.pair_data import collect_examples
    from services.models.pair_pipeline import fit_and_save
    from services.models.pair_train import PairTrainConfig
    from services.orchestrator.chain.pair_order import CARD_FILE
    from services.retrieval.embedder import build_embedder

    if query_split not in ("all", "train"):
        raise typer.BadParameter(f"--query-split {query_split!r}: use train or all (never fit on heldout)")
    lams = _cv_lams(cv_lams)
    settings = _with_reranker(load_settings(), reranker_dir)
    cfg = PairTrainConfig(lam=lam, folds=folds, seed=seed, cv_lams=lams)
    try:
        dataset = load_beir(resolve_dataset(data, settings), split).half(query_split)  # type: ignore[arg-type]
        reranker = _pair_reranker(settings)
        with progress_bar() as bar:
            examples, counts = collect_examples(
                dataset,
                settings,
                build_embedder(settings.embedding, settings.models_dir),
                reranker,
                cache_dir or settings.data_dir / "eval-cache",
                progress=task_updater(bar),
            )
        _check_paired(examples, folds)
        summary = fit_and_save(
            examples,
            counts,
            cfg,
            settings=settings,
            dataset=dataset,
            reranker_id=reranker.model_id,
            out_dir=out_dir,
            model_id=model_id,
            command=invocation(ctx),
        )
    except RampartError as exc:
        raise fail(exc) from exc
    cv = summary["cross_validation"]
    for name, figures in [("as served", cv["served"]), *cv["by_lam"].items()]:
        console.print(f"• {name if name == 'as served' else f'lam {name}'}: {figures}")
    console.print(f"[green]done[/green] {out_dir} (model card: {out_dir / CARD_FILE})")


def _cv_lams(cv_lams: str) -> tuple[float, ...]:
    """``--cv-lams`` as numbers, or the flag named in a usage error."""
    try:
        return tuple(float(x) for x in split_csv(cv_lams))
    except ValueError:
        raise typer.BadParameter(f"--cv-lams {cv_lams!r}: write numbers, e.g. 1,10,30") from None


def _with_reranker(settings: RampartSettings, reranker_dir: Path | None) -> RampartSettings:
    """``settings`` serving the reranker at ``reranker_dir`` (``--reranker-dir``), when one is given."""
    if reranker_dir is None:
        return settings
    return settings.model_copy(
        update={"rerank": settings.rerank.model_copy(update={"model_dir": reranker_dir})}
    )


def _pair_reranker(settings: RampartSettings) -> Reranker:
    """The reranker whose scores the pair model reads; a usage error when reranking is off."""
    from services.rerank.reranker import build_reranker

    reranker = build_reranker(settings.rerank, settings.models_dir)
    if reranker is None:
        raise typer.BadParameter(
            "the pair model reads the reranker's scores, but rerank.backend is none; unset "
            "RAMPART_RERANK__BACKEND"
        )
    return reranker


def _check_paired(examples: list[PairExample], folds: int) -> None:
    """A usage error unless at least one question per fold holds both supporting documents in its head."""
    from services.models.pair_pipeline import with_pair

    paired = with_pair(examples)
    if paired < folds:
        raise typer.BadParameter(
            f"only {paired} questions hold both supporting documents in their head; a pair model "
            f"needs at least {folds} (use a multi-hop set with qrels, e.g. hotpotqa_dev500)"
        )
