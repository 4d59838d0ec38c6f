"""``rampart bench …``: speed figures (targets live here, never in timed unit tests)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from services.cli.ui import (
    console,
    fail,
    invocation,
    load_settings,
    out,
    print_error,
    progress_bar,
    split_csv,
    task_updater,
    write_json_report,
)
from services.common.errors import ErrorCode, RampartError
from services.evaluation.beir import resolve_dataset

if TYPE_CHECKING:
    from services.common.settings import RampartSettings
    from services.evaluation.stack_bench import BenchCorpus

bench_app = typer.Typer(help="Benchmarks: search pipeline, reranker backends.", no_args_is_help=True)


@bench_app.command("search")
def bench_search(
    data_dir: Annotated[Path, typer.Argument(help="A BEIR folder, or a name under RAMPART_EVAL_DATA_DIR")],
    docs: Annotated[int, typer.Option(min=1, help="Documents to index (timed)")] = 500,
    queries: Annotated[int, typer.Option(min=1, help="Queries to time")] = 200,
    split: Annotated[str, typer.Option(help="qrels split whose queries are used")] = "test",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here")] = None,
) -> None:
    """Indexing rate and per-stage search latency (p50/p95) of the embedded pipeline."""
    from services.evaluation.beir import load_beir
    from services.evaluation.bench import run_bench
    from services.retrieval.embedder import build_embedder

    settings = load_settings()
    try:
        dataset = load_beir(resolve_dataset(data_dir, settings), split)
        embedder = build_embedder(settings.embedding, settings.models_dir)
        with progress_bar() as bar:
            progress = task_updater(bar)
            figures = run_bench(dataset, settings, embedder, docs=docs, queries=queries, progress=progress)
    except RampartError as exc:
        raise fail(exc) from exc
    table = Table("figure", "value", title=f"bench: {dataset.name} ({docs} docs, {queries} queries)")
    for key, value in figures.items():
        table.add_row(key, f"{value:g}")
    out.print(table)
    if json_out:
        record = {"dataset": dataset.name, "command": "rampart " + " ".join(sys.argv[1:]), "figures": figures}
        write_json_report(json_out, record)


@bench_app.command("rerank")
def bench_rerank(
    batches: Annotated[str, typer.Option(help="Pairs per call")] = "1,8,32",
    tokens: Annotated[int, typer.Option(min=16, max=512, help="Tokens per (query, passage) pair")] = 256,
    torch_model: Annotated[
        Path | None,
        typer.Option(
            help="HF folder of the same model for the PyTorch row (e.g. .rampart/train/reranker/hf)"
        ),
    ] = None,
    triton: Annotated[
        bool, typer.Option(help="Start a local tritonserver (rerank.triton.venv) and bench it")
    ] = True,
    pairs: Annotated[int, typer.Option(min=1, help="At least this many pairs scored per row")] = 64,
    triton_instances: Annotated[
        int | None,
        typer.Option(min=1, max=16, help="Triton model instances (instance_group count; default 2 on CPU)"),
    ] = None,
    threads: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=64,
            help="onnxruntime threads per call, both backends; 0 = all cores (default: rerank.threads)",
        ),
    ] = None,
    parallel: Annotated[
        int | None,
        typer.Option(
            min=0, max=64, help="onnxruntime calls at once, both backends (default: rerank.parallel)"
        ),
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the rows as JSON here")] = None,
) -> None:
    """pairs/s and p50/p95 per call: PyTorch vs ONNX fp32 vs int8 in-process, and Triton (gRPC) vs in-process."""
    from services.evaluation.rerank_bench import bench_served_backends, ratios

    settings = load_settings()
    sizes = [int(b) for b in split_csv(batches)]
    local = f"onnx-{settings.rerank.variant}"
    try:
        with progress_bar() as bar:
            manifest, rows = bench_served_backends(
                settings,
                batches=sizes,
                tokens=tokens,
                min_pairs=pairs,
                torch_model=torch_model,
                triton=triton,
                triton_instances=triton_instances,
                threads=settings.rerank.threads if threads is None else threads,
                parallel=settings.rerank.parallel if parallel is None else parallel,
                progress=task_updater(bar),
            )
    except RampartError as exc:
        raise fail(exc) from exc
    out.print(_rerank_table(rows, tokens))
    ratio_rows = ratios(rows, "triton", local) if triton else []
    for r in ratio_rows:
        console.print(
            f"triton/{local} throughput at batch {r['batch']}, concurrency {r['concurrency']}: {r['ratio']}"
            f" (median of the rounds' ratios: {r['paired_ratio']})"
        )
    if json_out:
        record = {
            "command": "rampart " + " ".join(sys.argv[1:]),
            "model": manifest.get("model_id"),
            "rows": rows,
            "ratios": ratio_rows,
        }
        write_json_report(json_out, record)


def _rerank_table(rows: list[dict[str, Any]], tokens: int) -> Table:
    """pairs/s and per-call latency, one row per backend, batch size and concurrency."""
    table = Table(
        "backend", "batch", "concurrency", "pairs/s", "p50 ms", "p95 ms", title=f"rerank at {tokens} tokens"
    )
    for r in rows:
        table.add_row(
            r["backend"],
            str(r["batch"]),
            str(r["concurrency"]),
            f"{r['pairs_per_s']:g}",
            f"{r['p50_ms']:g}",
            f"{r['p95_ms']:g}",
        )
    return table


@bench_app.command("factcheck")
def bench_factcheck(
    ctx: typer.Context,
    passages: Annotated[
        int | None,
        typer.Option(min=1, max=100, help="Passages per check (default: factcheck.depth, 10)"),
    ] = None,
    checks: Annotated[int, typer.Option(min=1, help="Checks timed per row")] = 100,
    concurrency: Annotated[
        str, typer.Option(help="Threads calling check() at once, one row each; the cache row uses the first")
    ] = "1,8",
    redis_url: Annotated[
        str | None,
        typer.Option(help="Use this Redis (broker, results, cache) instead of starting redis-server"),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(min=1, max=256, help="Worker processes (default: factcheck.celery.concurrency)"),
    ] = None,
    deadline_ms: Annotated[
        int, typer.Option(min=10, help="Per-check deadline; generous, so rows time work, not timeouts")
    ] = 60_000,
    stored_vectors: Annotated[
        bool,
        typer.Option(
            help="Give passages their embeddings up front, as search passes the index's stored vectors "
            "(nothing is embedded during a check)"
        ),
    ] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the rows as JSON here")] = None,
) -> None:
    """Fact-check round trip (checks/s, passages/s, p50/p95 per check): Celery workers vs in-process.

    Starts redis-server (unless --redis-url) and a `rampart worker` on a private queue, and stops
    both when done, on error or on Ctrl-C.
    """
    from services.common.redis_server import redact_url
    from services.evaluation.factcheck_bench import run_factcheck_bench, sigterm_as_interrupt
    from services.retrieval.embedder import build_embedder

    settings = load_settings()
    depth = passages or settings.factcheck.depth
    levels = _concurrency_levels(concurrency)
    try:
        embedder = build_embedder(settings.embedding, settings.models_dir)
        with sigterm_as_interrupt(), progress_bar() as bar:
            record = run_factcheck_bench(
                settings,
                embedder,
                passages=depth,
                checks=checks,
                concurrency=levels,
                redis_url=redis_url,
                workers=workers,
                deadline_s=deadline_ms / 1000,
                stored_vectors=stored_vectors,
                progress=task_updater(bar),
                started=lambda msg: console.print(msg),
            )
    except RampartError as exc:
        raise fail(exc) from exc
    out.print(_factcheck_table(record["rows"], checks, depth))
    _print_factcheck_notes(record)
    if json_out:
        command = invocation(ctx)
        if redis_url:  # the URL may carry a password
            command = command.replace(redis_url, redact_url(redis_url))
        write_json_report(json_out, {"command": command, **record})


def _concurrency_levels(concurrency: str) -> list[int]:
    """``--concurrency`` as positive integers, or the flag named in a usage error."""
    try:
        levels = [int(c) for c in split_csv(concurrency)]
    except ValueError:
        levels = []
    if not levels or min(levels) < 1:
        raise typer.BadParameter(
            f"give positive integers, e.g. 1,8 (got {concurrency!r})", param_hint="--concurrency"
        )
    return levels


def _factcheck_table(rows: list[dict[str, Any]], checks: int, depth: int) -> Table:
    """Throughput and latency per backend and concurrency, with the share the cache already held."""
    table = Table(
        "backend",
        "conc",
        "checks/s",
        "passages/s",
        "p50 ms",
        "p95 ms",
        "cached",
        title=f"fact-check round trip: {checks} checks x {depth} passages",
    )
    for r in rows:
        table.add_row(
            r["backend"],
            str(r["concurrency"]),
            f"{r['checks_per_s']:g}",
            f"{r['passages_per_s']:g}",
            f"{r['p50_ms']:g}",
            f"{r['p95_ms']:g}",
            f"{r['cached_before']:.0%}" if "cached_before" in r else "-",
        )
    return table


def _print_factcheck_notes(record: dict[str, Any]) -> None:
    """The throughput ratios, and a warning for each row that timed unverified checks (failures)."""
    for r in record["ratios"]:
        console.print(f"{r['backend']}/in-process throughput at concurrency {r['concurrency']}: {r['ratio']}")
    for r in record["rows"]:
        if r["unverified"]:
            console.print(
                f"[yellow]{r['backend']} at concurrency {r['concurrency']}: {r['unverified']} check(s) came "
                f"back unverified ({'; '.join(r['unverified_reasons'])}): that row times failures[/yellow]"
            )


@bench_app.command("contradiction")
def bench_contradiction(
    ctx: typer.Context,
    batch: Annotated[
        int, typer.Option(min=1, max=32, help="Pairs per predict() call (up to 32 = one session call)")
    ] = 32,
    pairs: Annotated[int, typer.Option(min=1, help="At least this many pairs scored per variant")] = 640,
    variants: Annotated[str, typer.Option(help="Installed variants to time: int8,fp32")] = "int8,fp32",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the rows as JSON here")] = None,
) -> None:
    """Contradiction classifier throughput (pairs/s, p50/p95 per call), every pair filling the model's
    max length: the installed model (<models_dir>/contradiction) on onnxruntime in-process."""
    from collections.abc import Sequence

    from services.evaluation.rerank_bench import measure
    from services.factcheck.contradiction import ContradictionModel
    from services.rerank.onnx_reranker import load_manifest

    settings = load_settings()
    model_dir = settings.contradiction_model_dir()
    rows: list[dict[str, Any]] = []
    try:
        installed = load_manifest(
            model_dir, what="contradiction classifier", fix="run `rampart models build`"
        )
        for variant in split_csv(variants):
            if variant not in installed["variants"]:
                console.print(f"[yellow]skipped[/yellow] {variant}: not installed at {model_dir}")
                continue
            model = ContradictionModel.from_dir(model_dir, variant=variant)

            def predict(claim: str, evidence: Sequence[str], model: ContradictionModel = model) -> Any:
                return model.predict([(e, claim) for e in evidence])

            figures = measure(predict, batch=batch, tokens=model.max_length, min_pairs=pairs)
            rows.append({"variant": variant, "batch": batch, "tokens": model.max_length, **figures})
    except RampartError as exc:
        raise fail(exc) from exc
    table = Table(
        "variant", "batch", "tokens", "pairs/s", "p50 ms", "p95 ms", title="contradiction classifier"
    )
    for r in rows:
        table.add_row(
            r["variant"],
            str(batch),
            str(r["tokens"]),
            f"{r['pairs_per_s']:g}",
            f"{r['p50_ms']:g}",
            f"{r['p95_ms']:g}",
        )
    out.print(table)
    if json_out:
        write_json_report(json_out, {"command": invocation(ctx), "model_dir": str(model_dir), "rows": rows})


@bench_app.command("serve")
def bench_serve(
    ctx: typer.Context,
    data_dir: Annotated[Path, typer.Argument(help="A BEIR folder, or a name under RAMPART_EVAL_DATA_DIR")],
    docs: Annotated[int, typer.Option(min=1, help="Documents indexed (not timed)")] = 300,
    queries: Annotated[int, typer.Option(min=1, help="Queries timed per mode and request shape")] = 100,
    split: Annotated[str, typer.Option(help="qrels split whose queries are used")] = "test",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here")] = None,
) -> None:
    """Latency Ray Serve adds (p50/p95): in-process vs Serve handle vs HTTP through the Serve proxy.

    Starts a local Ray cluster, whose servers bind every interface: run it in a loopback-only
    network namespace, e.g. ``unshare -n sh -c 'ip link set lo up && exec rampart bench serve scifact'``.
    """
    from services.evaluation.beir import load_beir

    try:
        from services.evaluation.serve_bench import SHAPES, run_serve_bench
    except ImportError as exc:
        print_error(f"{exc}; install the serve extra: pip install -e '.[serve]'")
        raise typer.Exit(code=2) from exc

    settings = load_settings()
    try:
        dataset = load_beir(resolve_dataset(data_dir, settings), split)
        with progress_bar() as bar:
            figures = run_serve_bench(
                dataset, settings, docs=docs, queries=queries, progress=task_updater(bar)
            )
    except RampartError as exc:
        raise fail(exc) from exc
    table = Table("mode", "request", "p50 ms", "p95 ms", "added p50", "added p95", title="bench serve")
    for mode in ("inprocess", "handle", "http"):
        for shape in SHAPES:
            added = (
                (
                    f"{figures[f'added_{mode}_{shape}_ms_p50']:g}",
                    f"{figures[f'added_{mode}_{shape}_ms_p95']:g}",
                )
                if mode != "inprocess"
                else ("", "")
            )
            table.add_row(
                mode,
                shape,
                f"{figures[f'{mode}_{shape}_ms_p50']:g}",
                f"{figures[f'{mode}_{shape}_ms_p95']:g}",
                *added,
            )
    out.print(table)
    for mode in ("handle", "http"):
        out.print(
            f"{mode}: median per-query added latency "
            + ", ".join(f"{shape} {figures[f'paired_added_{mode}_{shape}_ms_p50']:g} ms" for shape in SHAPES)
        )
    out.print(
        f"{figures['docs']:g} docs, {figures['chunks']:g} chunks, {figures['queries']:g} queries; "
        f"Serve ready in {figures['serve_ready_s']:g} s, Ray processes PSS {figures['ray_pss_mb']:g} MiB"
    )
    if json_out:
        write_json_report(json_out, {"dataset": dataset.name, "command": invocation(ctx), "figures": figures})


@bench_app.command("stack")
def bench_stack(
    ctx: typer.Context,
    data_dir: Annotated[
        Path,
        typer.Argument(help="A BEIR folder (or a name under RAMPART_EVAL_DATA_DIR), or a folder of files"),
    ] = Path("samples"),
    docs: Annotated[int, typer.Option(min=1, help="Documents ingested (the first N; not timed)")] = 300,
    queries: Annotated[int, typer.Option(min=1, help="Requests timed per endpoint and mode")] = 50,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed requests first, per endpoint and mode")] = 5,
    split: Annotated[str, typer.Option(help="qrels split whose queries are used (BEIR)")] = "test",
    locust_seconds: Annotated[
        int, typer.Option(min=0, help="Locust run against the stack (/v1/search); 0 skips it")
    ] = 60,
    locust_users: Annotated[int, typer.Option(min=1, help="Concurrent locust users (closed loop)")] = 4,
    interleave: Annotated[
        bool,
        typer.Option(
            help="Keep both modes up and alternate them request by request (steadier on a busy machine) "
            "instead of timing the embedded gateway after the stack has stopped"
        ),
    ] = False,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here")] = None,
) -> None:
    """Latency the distributed stack adds (p50/p95 of /v1/search and /v1/answer, stack vs embedded
    gateway, both over HTTP), and a locust run against the stack.

    Starts the whole stack (Ray binds every interface): run it in a loopback-only network namespace,
    ``python -m tests.e2e.isolated rampart bench stack`` (docs/stack.md, "Measuring").
    """
    from services.evaluation.factcheck_bench import sigterm_as_interrupt
    from services.evaluation.stack_bench import BenchOptions, bench_corpus, run_stack_bench

    settings = load_settings()
    options = BenchOptions(
        queries=queries,
        warmup=warmup,
        locust_seconds=locust_seconds,
        locust_users=locust_users,
        locust_spawn_rate=float(locust_users),
    )
    try:
        corpus = bench_corpus(resolve_dataset(data_dir, settings), docs, split)
        with sigterm_as_interrupt(), progress_bar() as bar:
            record = run_stack_bench(
                corpus,
                settings,
                options,
                interleave=interleave,
                progress=task_updater(bar),
                started=lambda m: console.print(m),
            )
    except RampartError as exc:
        raise fail(exc) from exc
    title = f"bench stack: {corpus.name}" + (" (interleaved)" if interleave else "")
    out.print(_stack_table(record["rows"], title))
    out.print(stage_table(record["rows"]))
    _print_stack_summary(record, queries=queries, warmup=warmup)
    if json_out:
        write_json_report(json_out, {"command": invocation(ctx), **record})


@bench_app.command("faults")
def bench_faults(
    ctx: typer.Context,
    data_dir: Annotated[
        Path,
        typer.Argument(help="A BEIR folder (or a name under RAMPART_EVAL_DATA_DIR), or a folder of files"),
    ] = Path("samples"),
    docs: Annotated[int, typer.Option(min=1, help="Documents ingested before the load (the first N)")] = 100,
    split: Annotated[str, typer.Option(help="qrels split whose queries are used (BEIR)")] = "test",
    programs: Annotated[
        str, typer.Option(help="Comma-separated programs to kill in turn; empty: every program of the stack")
    ] = "",
    window_s: Annotated[
        float, typer.Option(min=1.0, help="Load kept after each kill at least this long (s)")
    ] = 20.0,
    recover_timeout_s: Annotated[
        float, typer.Option(min=1.0, help="Longest wait for a killed program to serve undegraded (s)")
    ] = 180.0,
    users: Annotated[int, typer.Option(min=1, help="Concurrent locust users (search + answer)")] = 2,
    stage_deadlines: Annotated[
        bool,
        typer.Option(
            help="Triton and fact-check deadlines of 15 s for the run (a busy machine); --no-stage-deadlines: "
            "the settings' own (2 s, 3 s), as deployed"
        ),
    ] = True,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here")] = None,
) -> None:
    """SIGKILL each program of the stack in turn under locust load and an ingest loop: per kill, the
    requests, 5xx, share flagged degraded (which stages) and recovery time; then every acknowledged
    document must be indexed or reported failed (exit 1 when one is lost).

    Starts the whole stack (Ray binds every interface): run it in a loopback-only network namespace,
    ``python -m tests.e2e.isolated rampart bench faults``.
    """
    from services.evaluation.fault_bench import FaultOptions, run_fault_bench

    options = FaultOptions(
        window_s=window_s,
        recover_timeout_s=recover_timeout_s,
        users=users,
        spawn_rate=float(users),
        programs=tuple(split_csv(programs)) or None,
        stage_deadlines=stage_deadlines,
    )
    record, corpus = _on_a_private_stack(
        data_dir, docs, split, lambda c, s: run_fault_bench(c, s, options, started=console.print)
    )
    _print_faults(record, f"bench faults: {corpus.name}, {users} users, windows ≥ {window_s:g} s")
    if json_out:
        write_json_report(json_out, {"command": invocation(ctx), **record})
    if record["documents"]["lost"]:
        raise typer.Exit(1)


def _on_a_private_stack(
    data_dir: Path, docs: int, split: str, run: Callable[[BenchCorpus, RampartSettings], dict[str, Any]]
) -> tuple[dict[str, Any], BenchCorpus]:
    """The corpus of ``data_dir`` and ``run``'s record over it (a bench on the private stack, which a
    SIGTERM stops cleanly); a ``RampartError`` ends the command with its message."""
    from services.evaluation.factcheck_bench import sigterm_as_interrupt
    from services.evaluation.stack_bench import bench_corpus

    settings = load_settings()
    try:
        corpus = bench_corpus(resolve_dataset(data_dir, settings), docs, split)
        with sigterm_as_interrupt():
            return run(corpus, settings), corpus
    except RampartError as exc:
        raise fail(exc) from exc


def _print_faults(record: dict[str, Any], title: str) -> None:
    """Per killed program (the baseline first): load, errors, degraded share and stages, recovery;
    then the totals and the acknowledged documents."""
    table = Table(
        "killed",
        "s",
        "requests",
        "5xx",
        "no conn.",
        "degraded",
        "stages named",
        "p50 ms",
        "p95 ms",
        "back s",
        "undegraded s",
        title=title,
    )
    for w in record["windows"]:
        table.add_row(
            w["program"],
            f"{w['seconds']:g}",
            str(w["requests"]),
            str(w["errors_5xx"]),
            str(w["no_connection"]),
            f"{w['degraded_share']:.0%}",
            ", ".join(f"{k} {v}" for k, v in w["degraded_stages"].items()) or "—",
            "—" if w["p50_ms"] is None else f"{w['p50_ms']:g}",
            "—" if w["p95_ms"] is None else f"{w['p95_ms']:g}",
            "—" if w["back_s"] is None else f"{w['back_s']:g}",
            "—" if w["undegraded_s"] is None else f"{w['undegraded_s']:g}",
        )
    out.print(table)
    for w in record["windows"]:
        for error, count in w.get("errors", {}).items():
            console.print(f"{w['program']} window: {count} × {escape(error)}")
    t, d = record["totals"], record["documents"]
    out.print(
        f"total: {t['requests']} requests, {t['errors_5xx']} 5xx, {t['no_connection']} without a "
        f"connection, {t['degraded_share']:.0%} of the 200s degraded"
    )
    colour = "red" if d["lost"] else "green"
    console.print(
        f"documents: {d['sent']} sent, {d['acknowledged']} acknowledged, {d['indexed']} indexed, "
        f"{d['failed']} reported failed, [{colour}]{d['lost']} lost[/{colour}]; "
        f"refused: {d['refused'] or 'none'}"
    )
    if d["lost"]:
        console.print(f"[red]lost[/red]: {d['lost_states']}")


@bench_app.command("soak")
def bench_soak(
    ctx: typer.Context,
    data_dir: Annotated[
        Path,
        typer.Argument(help="A BEIR folder (or a name under RAMPART_EVAL_DATA_DIR), or a folder of files"),
    ] = Path("samples"),
    docs: Annotated[int, typer.Option(min=1, help="Documents ingested before the load (the first N)")] = 100,
    split: Annotated[str, typer.Option(help="qrels split whose queries are used (BEIR)")] = "test",
    minutes: Annotated[float, typer.Option(min=0.1, help="How long the load runs (min)")] = 30.0,
    warmup_s: Annotated[
        float, typer.Option(min=0.0, help="Start of the run left out of the comparison (s)")
    ] = 180.0,
    sample_s: Annotated[float, typer.Option(min=0.5, help="Memory sampled this often (s)")] = 15.0,
    bound: Annotated[
        float, typer.Option(min=0.0, help="Largest growth, last fifth over first, still flat")
    ] = 0.10,
    users: Annotated[int, typer.Option(min=1, help="Concurrent locust users (search + answer)")] = 2,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here")] = None,
) -> None:
    """Hold the stack under locust load and a document-replacing ingest loop for MINUTES, sampling each
    program's memory (PSS of its process tree): per program the first and last fifth after warm-up,
    growth, peak and slope; per fifth the latency. Exit 1 when a program grew past BOUND or restarted.

    Starts the whole stack (Ray binds every interface): run it in a loopback-only network namespace,
    ``python -m tests.e2e.isolated rampart bench soak`` (``make soak``).
    """
    from services.evaluation.soak_bench import SoakOptions, run_soak_bench

    if warmup_s >= minutes * 60:
        raise fail(
            RampartError(
                ErrorCode.INVALID_ARGUMENT,
                f"--warmup-s {warmup_s:g} leaves nothing of a {minutes:g}-minute run to compare; "
                "lower it or run longer",
            )
        )
    options = SoakOptions(minutes=minutes, warmup_s=warmup_s, sample_s=sample_s, bound=bound, users=users)
    record, corpus = _on_a_private_stack(
        data_dir, docs, split, lambda c, s: run_soak_bench(c, s, options, started=console.print)
    )
    _print_soak(record, f"bench soak: {corpus.name}, {users} users, {minutes:g} min")
    if json_out:
        write_json_report(json_out, {"command": invocation(ctx), **record})
    if not record["flat"]:
        raise typer.Exit(1)


def _or_dash(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _print_soak(record: dict[str, Any], title: str) -> None:
    """Per program its memory over the run; then per fifth of the run the load's figures."""
    table = Table(
        "program", "samples", "first MiB", "last MiB", "growth", "peak MiB", "MiB/h", "flat", title=title
    )
    for name, m in record["memory"].items():
        flat = "restarted" if m["restarted"] else {True: "yes", False: "NO", None: "—"}[m["flat"]]
        table.add_row(
            name,
            str(m["samples"]),
            _or_dash(m["first_mib"]),
            _or_dash(m["last_mib"]),
            "—" if m["growth"] is None else f"{m['growth']:+.1%}",
            _or_dash(m["peak_mib"]),
            _or_dash(m["slope_mib_per_h"]),
            flat,
        )
    out.print(table)
    parts = Table(
        "part", "requests", "5xx", "no conn.", "degraded", "p50 ms", "p95 ms", title="load per fifth"
    )
    for w in record["parts"]:
        parts.add_row(
            w["program"],
            str(w["requests"]),
            str(w["errors_5xx"]),
            str(w["no_connection"]),
            f"{w['degraded_share']:.0%}",
            "—" if w["p50_ms"] is None else f"{w['p50_ms']:g}",
            "—" if w["p95_ms"] is None else f"{w['p95_ms']:g}",
        )
    out.print(parts)
    d = record["documents"]
    console.print(
        f"documents replaced: {d['sent']} sent, {d['acknowledged']} acknowledged; refused: {d['refused'] or 'none'}"
    )
    colour = "green" if record["flat"] else "red"
    console.print(
        f"[{colour}]memory {'flat' if record['flat'] else 'NOT flat'}[/{colour}] within {record['bound']:.0%}"
    )


@bench_app.command("scale")
def bench_scale(
    ctx: typer.Context,
    data_dir: Annotated[
        Path,
        typer.Argument(help="A BEIR folder (or a name under RAMPART_EVAL_DATA_DIR), or a folder of files"),
    ] = Path("samples"),
    docs: Annotated[int, typer.Option(min=1, help="Documents ingested (the first N; not timed)")] = 300,
    pipeline_replicas: Annotated[
        str, typer.Option(help="Comma-separated pipeline replica counts, one stack and run each")
    ] = "1,2",
    service_replicas: Annotated[
        int, typer.Option(min=1, max=16, help="Retrieval replicas and ingest workers in every run")
    ] = 1,
    warmup: Annotated[int, typer.Option(min=0, help="Untimed searches before each locust run")] = 5,
    split: Annotated[str, typer.Option(help="qrels split whose queries are used (BEIR)")] = "test",
    locust_seconds: Annotated[int, typer.Option(min=5, help="Length of each locust run")] = 60,
    locust_users: Annotated[int, typer.Option(min=1, help="Concurrent locust users (closed loop)")] = 4,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here")] = None,
) -> None:
    """/v1/search throughput and p95 of the stack on OpenSearch with 1, 2, … pipeline replicas (a node
    of its own on a free port unless RAMPART_OPENSEARCH__URL names one; docs/opensearch.md).

    Starts the stack once per count (Ray binds every interface): run it in a loopback-only network
    namespace, ``python -m tests.e2e.isolated rampart bench scale``.
    """
    from services.evaluation.factcheck_bench import sigterm_as_interrupt
    from services.evaluation.scale_bench import run_scale_bench
    from services.evaluation.stack_bench import BenchOptions, bench_corpus

    counts: list[int] = []
    for part in split_csv(pipeline_replicas):
        if not part.isdigit() or not 1 <= int(part) <= 16:
            raise fail(
                RampartError(
                    ErrorCode.INVALID_ARGUMENT,
                    f"--pipeline-replicas {pipeline_replicas!r}: {part!r} is not a count from 1 to 16; "
                    "give e.g. --pipeline-replicas 1,2",
                )
            )
        counts.append(int(part))
    settings = load_settings()
    options = BenchOptions(
        queries=1,
        warmup=warmup,
        locust_seconds=locust_seconds,
        locust_users=locust_users,
        locust_spawn_rate=float(locust_users),
    )
    try:
        corpus = bench_corpus(resolve_dataset(data_dir, settings), docs, split)
        with sigterm_as_interrupt(), progress_bar() as bar:
            record = run_scale_bench(
                corpus,
                settings,
                options,
                counts,
                service_replicas=service_replicas,
                progress=task_updater(bar),
                started=lambda m: console.print(m),
            )
    except RampartError as exc:
        raise fail(exc) from exc
    _print_scale(
        record,
        f"bench scale: {corpus.name}, {locust_users} users × {locust_seconds} s, "
        f"{service_replicas} retrieval replica(s), {record['cpus']} CPUs",
    )
    if json_out:
        write_json_report(json_out, {"command": invocation(ctx), **record})


def _print_scale(record: dict[str, Any], title: str) -> None:
    """Per replica count: the locust figures and the stack's CPU per request, then where the CPU went."""
    table = Table(
        "pipeline replicas",
        "requests",
        "failures",
        "req/s",
        "p50 ms",
        "p95 ms",
        "CPU s / request",
        "stack ready s",
        title=title,
    )
    for run in record["runs"]:
        loc = run["locust"]
        table.add_row(
            str(run["pipeline_replicas"]),
            f"{loc['requests']:g}",
            f"{loc['failures']:g}",
            f"{loc['requests_per_s']:g}",
            f"{loc['p50_ms']:g}",
            f"{loc['p95_ms']:g}",
            f"{run['cpu_s_per_request']}",
            f"{run['stack_ready_s']:g}",
        )
    out.print(table)
    for run in record["runs"]:
        used = sorted(run["cpu_s"].items(), key=lambda kv: -kv[1])
        out.print(
            f"{run['pipeline_replicas']} pipeline replica(s), CPU s during the run: "
            + ", ".join(f"{name} {seconds:g}" for name, seconds in used)
        )


@bench_app.command("autoscale")
def bench_autoscale(
    ctx: typer.Context,
    data_dir: Annotated[
        Path,
        typer.Argument(help="A BEIR folder (or a name under RAMPART_EVAL_DATA_DIR), or a folder of files"),
    ] = Path("samples"),
    docs: Annotated[int, typer.Option(min=1, help="Documents ingested (the first N; not timed)")] = 300,
    low: Annotated[int, typer.Option(min=1, max=16, help="Pipeline replicas at least (Serve's floor)")] = 1,
    high: Annotated[int, typer.Option(min=1, max=16, help="Pipeline replicas at most (Serve's ceiling)")] = 2,
    idle_seconds: Annotated[float, typer.Option(min=0, help="Quiet before the load")] = 30.0,
    cool_seconds: Annotated[
        float,
        typer.Option(min=0, help="Quiet after the load: more than --downscale-delay to see replicas go"),
    ] = 120.0,
    upscale_delay: Annotated[float, typer.Option(min=0, help="serve.upscale_delay_s for the run")] = 10.0,
    downscale_delay: Annotated[float, typer.Option(min=0, help="serve.downscale_delay_s for the run")] = 60.0,
    split: Annotated[str, typer.Option(help="qrels split whose queries are used (BEIR)")] = "test",
    locust_seconds: Annotated[int, typer.Option(min=5, help="Length of the load")] = 120,
    locust_users: Annotated[int, typer.Option(min=1, help="Concurrent locust users (closed loop)")] = 6,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the figures as JSON here")] = None,
) -> None:
    """Serve's autoscaler under load: the stack with the pipeline between --low and --high replicas,
    quiet, a locust run, quiet again; prints the replica count over time and exits 1 unless the pipeline
    reached --high under load and went back to --low after (docs/ray-serve.md, "Autoscaling").

    Run it in a loopback-only network namespace (Ray binds every interface):
    ``python -m tests.e2e.isolated rampart bench autoscale``.
    """
    from services.evaluation.scale_bench import AutoscalePlan, run_autoscale_bench
    from services.evaluation.stack_bench import BenchOptions

    if high <= low:
        raise typer.BadParameter(
            f"--high {high} must exceed --low {low}: there is nothing to scale otherwise"
        )
    plan = AutoscalePlan(
        low=low,
        high=high,
        idle_s=idle_seconds,
        cool_s=cool_seconds,
        upscale_delay_s=upscale_delay,
        downscale_delay_s=downscale_delay,
    )
    options = BenchOptions(
        queries=50,
        warmup=3,
        locust_seconds=locust_seconds,
        locust_users=locust_users,
        locust_spawn_rate=float(locust_users),
    )
    record, _ = _on_a_private_stack(
        data_dir, docs, split, lambda c, s: run_autoscale_bench(c, s, options, plan, started=console.print)
    )
    _print_autoscale(record)
    if json_out:
        write_json_report(json_out, {"command": invocation(ctx), **record})
    if not record["summary"]["as_asked"]:
        raise typer.Exit(1)


def _print_autoscale(record: dict[str, Any]) -> None:
    """The replica count each time it changed, the locust figures, the summary."""
    load, loc, summary = record["load"], record["locust"], record["summary"]
    table = Table("s", "pipeline replicas", "phase", title=f"bench autoscale: {record['corpus']}")
    last = None
    for t, n in record["samples"]:
        if n != last:
            phase = "quiet" if t < load["start_s"] else "load" if t <= load["end_s"] else "after"
            table.add_row(f"{t:g}", str(n), phase)
            last = n
    out.print(table)
    out.print(
        f"load {load['start_s']:g}-{load['end_s']:g} s: {loc['requests']:g} requests, {loc['failures']:g} "
        f"failed, {loc['requests_per_s']:g} req/s, p50 {loc['p50_ms']:g} ms, p95 {loc['p95_ms']:g} ms"
    )
    out.print(", ".join(f"{k} {v}" for k, v in summary.items()))


def _stack_table(rows: list[dict[str, Any]], title: str) -> Table:
    """Latency per mode (stack, embedded) and endpoint, with the requests that ran degraded."""
    table = Table("mode", "endpoint", "p50 ms", "p95 ms", "mean ms", "degraded", title=title)
    for r in rows:
        table.add_row(
            r["mode"],
            r["endpoint"],
            f"{r['p50_ms']:g}",
            f"{r['p95_ms']:g}",
            f"{r['mean_ms']:g}",
            str(r["degraded"]),
        )
    return table


def _print_stack_summary(record: dict[str, Any], *, queries: int, warmup: int) -> None:
    """What the tables do not show: each endpoint's ratio against the goal, the paired added latency,
    the run's size and start-up times, and the locust run."""
    from services.evaluation.stack_bench import GOAL_RATIO

    for endpoint, ratio in record["ratios"].items():
        verdict = "[green]within[/green]" if ratio <= GOAL_RATIO else "[red]over[/red]"
        console.print(f"stack/embedded p50, {endpoint}: {ratio:g} ({verdict} the {GOAL_RATIO:g} goal)")
    if "paired_added_p50_ms" in record:
        out.print(
            "median per-query latency the stack adds: "
            + ", ".join(f"{e} {ms:g} ms" for e, ms in record["paired_added_p50_ms"].items())
        )
    out.print(
        f"{record['docs']} docs, {queries} timed requests per row after {warmup} warm-up; stack ready in "
        f"{record['stack_ready_s']:g} s, ingest {record['stack_ingest_s']:g} s (stack) vs "
        f"{record['embedded_ingest_s']:g} s (embedded)"
    )
    locust = record["locust"]
    if locust is not None:
        out.print(
            f"locust, {locust['users']} users for {locust['seconds']} s on /v1/search: "
            f"{locust['requests_per_s']:g} req/s, {locust['requests']:g} requests, {locust['failures']:g} "
            f"failures, p50 {locust['p50_ms']:g} ms, p95 {locust['p95_ms']:g} ms"
        )
        for example in locust["failure_examples"]:
            console.print(f"[red]failure[/red]: {escape(example)}")


def stage_table(rows: list[dict[str, Any]]) -> Table:
    """Median ms per pipeline stage (the responses' ``timings_ms``), one column per mode and endpoint."""
    columns: list[tuple[str, dict[str, float]]] = [
        (f"{r['mode']} {r['endpoint']}", dict(r.get("stages_p50_ms") or {})) for r in rows
    ]
    stages = sorted({stage for _, per in columns for stage in per})
    table = Table("stage p50 ms", *[name for name, _ in columns], title="where the time goes")
    for stage in stages:
        table.add_row(stage, *[f"{per[stage]:g}" if stage in per else "—" for _, per in columns])
    return table
