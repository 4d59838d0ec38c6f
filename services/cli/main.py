"""``rampart``: the command line (typer + rich). Every command builds settings once and passes them on."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from services.cli.ask import ask
from services.cli.bench import bench_app
from services.cli.certs import certs_app
from services.cli.evaluation import PROFILE_OPTION, eval_app
from services.cli.feedback import feedback_app
from services.cli.index import index_app
from services.cli.opensearch import opensearch_app
from services.cli.serve_ray import serve_ray
from services.cli.stack import stack_app
from services.cli.train import train_app
from services.cli.triton import triton_app
from services.cli.tune import tune_app
from services.cli.ui import (
    console,
    fail,
    load_settings,
    out,
    print_error,
    progress_bar,
    server_hint,
    split_csv,
    task_updater,
)
from services.cli.worker import worker
from services.common.config import CorpusProfile
from services.common.errors import RampartError
from services.common.settings import RampartSettings
from services.common.types import Acl, Document, FusionMethod, Principal
from services.common.verdicts import Verdict
from services.evaluation.beir import resolve_dataset

if TYPE_CHECKING:
    from services.evaluation.report import EvalReport
    from services.ingest.service import IngestResult

app = typer.Typer(help="Rampart: a corruption-resistant enterprise search gateway.", no_args_is_help=True)
models_app = typer.Typer(help="Build the models Rampart serves.", no_args_is_help=True)
keys_app = typer.Typer(help="Manage API keys (stored hashed).", no_args_is_help=True)
demo_app = typer.Typer(help="The sample corpus shipped in samples/.", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.add_typer(keys_app, name="keys")
app.add_typer(demo_app, name="demo")
app.add_typer(bench_app, name="bench")
app.add_typer(train_app, name="train")
app.add_typer(triton_app, name="triton")
app.command("worker")(worker)
app.command("serve-ray")(serve_ray)
app.command("ask")(ask)
app.add_typer(eval_app, name="eval")
app.add_typer(tune_app, name="tune")
app.add_typer(stack_app, name="stack")
app.add_typer(certs_app, name="certs")
app.add_typer(opensearch_app, name="opensearch")
app.add_typer(index_app, name="index")
app.add_typer(feedback_app, name="feedback")


# ---- models ---------------------------------------------------------------------------------------
@models_app.command("build")
def models_build(force: Annotated[bool, typer.Option(help="Rebuild even if up to date")] = False) -> None:
    """Export the packaged models to ONNX under RAMPART_MODELS_DIR (needs the "build" extra: torch,
    transformers, onnx)."""
    from services.models.build import build_models

    settings = load_settings()
    try:
        built = build_models(settings.models_dir, force=force, progress=lambda m: console.print(f"• {m}"))
    except RampartError as exc:
        raise fail(exc) from exc
    for name, path in built.items():
        console.print(f"[green]ready[/green] {name}: {path}")


@models_app.command("export-reranker")
def models_export_reranker(
    source: Annotated[
        str, typer.Argument(help="HF cross-encoder: a local folder or a hub name (needs network)")
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="Folder to write")] = Path(
        ".rampart/export/reranker"
    ),
    max_length: Annotated[int, typer.Option(min=16, max=512, help="Tokens per pair at serving time")] = 256,
    variants: Annotated[str, typer.Option(help="fp32,int8")] = "fp32,int8",
    model_id: Annotated[str | None, typer.Option(help="Name in the manifest (default: the source)")] = None,
    install: Annotated[
        bool, typer.Option(help="Install as the served reranker (<models_dir>/reranker)")
    ] = False,
) -> None:
    """Export any Hugging Face cross-encoder (e.g. cross-encoder/ms-marco-MiniLM-L-6-v2) to ONNX, like ours."""
    from services.models.reranker_export import export_reranker
    from services.models.reranker_pipeline import install as install_model

    settings = load_settings()
    try:
        path = export_reranker(
            source,
            out_dir,
            model_id=model_id,
            max_length=max_length,
            variants=tuple(split_csv(variants)),
            progress=lambda m: console.print(f"• {m}"),
        )
        if install:
            console.print(f"[green]installed[/green] {install_model(path, settings.reranker_model_dir())}")
    except RampartError as exc:
        raise fail(exc) from exc
    console.print(f"[green]exported[/green] {path}")


# ---- serve ----------------------------------------------------------------------------------------
@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address (default from settings: 127.0.0.1)")] = None,
    port: Annotated[int | None, typer.Option(help="Port (default 8080)")] = None,
) -> None:
    """Serve the HTTP gateway: on the embedded default (one process, index on local disk), or in front
    of the distributed stack when remote.orchestrator_url is set (docs/stack.md)."""
    import uvicorn

    from services.common.otel import flush_tracing, start_client_tracing
    from services.gateway.api_keys import ApiKeyStore
    from services.gateway.app import create_app
    from services.gateway.backends import GatewayBackends
    from services.orchestrator.runtime import Runtime

    settings = load_settings()
    runtime: Runtime | None = None
    try:
        start_client_tracing("rampart-gateway")  # before any client exists (a bad OTEL_* is an error)
        if settings.remote.orchestrator_url:
            backends = GatewayBackends.remote(settings)
            shown = (
                f"orchestrator {settings.remote.orchestrator_url}, ingest {settings.remote.ingest_address}"
            )
        else:
            runtime = Runtime.open(settings)
            runtime.orchestrator  # noqa: B018  (build the adaptive stages now: a missing model fails at start)
            backends = GatewayBackends.embedded(runtime)
            shown = str(runtime.index.stats())
    except RampartError as exc:
        raise fail(exc) from exc
    keys = ApiKeyStore.from_settings(settings)
    if not keys.list():
        console.print(
            "[yellow]no API keys yet[/yellow]: create one with `rampart keys create --tenant T --user U`"
        )
    bind_host = host or settings.gateway.host
    bind_port = port or settings.gateway.port
    console.print(f"[green]serving[/green] http://{bind_host}:{bind_port}  (OpenAPI: /docs)  {shown}")
    try:
        uvicorn.run(create_app(backends, keys), host=bind_host, port=bind_port, log_config=None)
    finally:
        if runtime is not None:
            runtime.close()
        flush_tracing()


# ---- ingest ----------------------------------------------------------------------------------------
UrlOpt = Annotated[
    str | None,
    typer.Option("--url", envvar="RAMPART_URL", help="Use a running gateway instead of the local index"),
]
KeyOpt = Annotated[str | None, typer.Option("--api-key", envvar="RAMPART_API_KEY", help="API key for --url")]


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders (folders are walked recursively)")],
    tenant: Annotated[str, typer.Option(help="Tenant the documents belong to")],
    groups: Annotated[
        str, typer.Option(help="Default ACL groups, comma-separated ('*' = whole tenant)")
    ] = "*",
    users: Annotated[str, typer.Option(help="Default ACL users, comma-separated")] = "",
    batch_size: Annotated[int, typer.Option(min=1, max=256, help="Documents sent per batch")] = 32,
    recursive: Annotated[bool, typer.Option(help="Walk folders recursively")] = True,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Index files (txt, md, html, pdf, docx); a <file>.meta.json sidecar sets title/ACL/metadata.

    Other files in a folder are skipped and listed. Exit code 0 when every supported file was
    indexed or unchanged, 1 when any failed or when no supported file was found at all, 2 on bad
    input (a missing path, --url without a key, the index in use)."""
    from services.ingest.files import discover

    settings = load_settings()
    for p in paths:
        if not p.exists():
            print_error(f"{p} does not exist")
            raise typer.Exit(code=2)
    try:
        default_acl = Acl(users=split_csv(users), groups=split_csv(groups))
        send, close = _ingest_target(settings, url, api_key)
    except ValueError as exc:
        print_error(f"{exc}")
        raise typer.Exit(code=2) from exc
    except RampartError as exc:
        raise fail(server_hint(exc, settings)) from exc
    skipped: list[tuple[Path, str]] = []
    files = list(discover(paths, recursive=recursive, on_skip=lambda f, why: skipped.append((f, why))))
    if not files:
        close()
        _print_skipped(skipped)
        print_error(
            f"nothing to ingest: no supported file under {', '.join(str(p) for p in paths)}"
            f" ({len(skipped)} skipped); supported: {SUPPORTED_FILES}"
        )
        raise typer.Exit(code=1)
    try:
        tally = _ingest_files(files, send, tenant=tenant, default_acl=default_acl, batch_size=batch_size)
    except RampartError as exc:
        raise fail(exc) from exc
    finally:
        close()
    _print_ingested(tally, skipped)
    if tally.failures:
        raise typer.Exit(code=1)


@dataclass
class _Tally:
    """What became of the files of one ``rampart ingest``."""

    indexed: int = 0
    unchanged: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)  # (document id or file, reason)

    def add(self, result: IngestResult) -> None:
        from services.ingest.service import Outcome

        if result.outcome is Outcome.INDEXED:
            self.indexed += 1
        elif result.outcome is Outcome.UNCHANGED:
            self.unchanged += 1
        else:
            self.failures.append((result.id, result.error or result.outcome.value))


def _ingest_files(
    files: list[tuple[Path, Path]],
    send: Callable[[list[Document]], list[IngestResult]],
    *,
    tenant: str,
    default_acl: Acl,
    batch_size: int,
) -> _Tally:
    """Load each ``(root, file)`` and ``send`` the documents ``batch_size`` at a time, under a progress
    bar; a file that cannot be read is a failure of its own, not the end of the run."""
    from services.ingest.files import load

    tally = _Tally()
    with progress_bar() as bar:
        task = bar.add_task(f"ingesting into tenant {tenant}", total=len(files))

        def flush(batch: list[Document]) -> None:
            for r in send(batch):
                tally.add(r)
                bar.advance(task)

        batch: list[Document] = []
        for root, f in files:
            loaded = load(root, f, tenant=tenant, default_acl=default_acl)
            if loaded.document is None:
                tally.failures.append((str(f), loaded.error or "unreadable"))
                bar.advance(task)
                continue
            batch.append(loaded.document)
            if len(batch) >= batch_size:
                flush(batch)
                batch = []
        if batch:
            flush(batch)
    return tally


def _print_ingested(tally: _Tally, skipped: list[tuple[Path, str]]) -> None:
    """The counts, the files passed over, and a table of the failures with their reasons."""
    failed = len(tally.failures)
    console.print(
        f"[green]{tally.indexed} indexed[/green], {tally.unchanged} unchanged, "
        f"[{'red' if failed else 'green'}]{failed} failed[/], "
        f"[{'yellow' if skipped else 'green'}]{len(skipped)} skipped[/]"
    )
    _print_skipped(skipped)
    if tally.failures:
        table = Table("file", "reason", title="failed", title_style="red")
        for name, reason in tally.failures:
            table.add_row(escape(name), escape(reason))
        console.print(table)


SKIPPED_SHOWN = 5
SUPPORTED_FILES = "txt, md, html, pdf, docx"


def _print_skipped(skipped: list[tuple[Path, str]]) -> None:
    """Name the first few files ingest passed over and why, so a missing document is not a mystery."""
    if not skipped:
        return
    console.print(
        f"[yellow]skipped {len(skipped)} file(s)[/yellow], not ingested (supported: {SUPPORTED_FILES}):",
        highlight=False,
    )
    for path, why in skipped[:SKIPPED_SHOWN]:
        console.print(f"  {escape(str(path))}: {escape(why)}", highlight=False)
    if len(skipped) > SKIPPED_SHOWN:
        console.print(f"  … and {len(skipped) - SKIPPED_SHOWN} more", highlight=False)


def _ingest_target(
    settings: RampartSettings, url: str | None, api_key: str | None
) -> tuple[Callable[[list[Document]], list[IngestResult]], Callable[[], None]]:
    """Where batches go: a running gateway (``--url``) or the local embedded index."""
    if url:
        from services.cli.remote import RemoteGateway

        if not api_key:
            raise ValueError("--url needs --api-key (or RAMPART_API_KEY) with the ingest scope")
        remote = RemoteGateway(url, api_key)
        return remote.ingest, remote.close
    from services.orchestrator.runtime import Runtime

    runtime = Runtime.open(settings)
    return runtime.ingest.ingest, runtime.close


# ---- search ----------------------------------------------------------------------------------------
VERDICT_STYLE = {
    Verdict.RELEVANT: "green",
    Verdict.IRRELEVANT: "yellow",
    Verdict.ADVERSARIAL: "red",
    Verdict.COUNTERFACTUAL: "red",
}


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to search for")],
    tenant: Annotated[
        str,
        typer.Option(
            help="Search as a principal of this tenant (with --url: must be the key's, else refused)"
        ),
    ] = "",
    user: Annotated[str, typer.Option(help="Search as this user")] = "cli",
    groups: Annotated[str, typer.Option(help="The principal's groups, comma-separated")] = "",
    top_k: Annotated[int, typer.Option(min=1, max=1000, help="Number of results")] = 5,
    method: Annotated[FusionMethod | None, typer.Option(help="minmax, zscore or rrf")] = None,
    bm25_weight: Annotated[
        float | None, typer.Option(min=0.0, max=1.0, help="dense weight = 1 - this")
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print the whole response as JSON (results, filtered, degraded, factcheck_fallback, …)",
        ),
    ] = False,
    url: UrlOpt = None,
    api_key: KeyOpt = None,
) -> None:
    """Search as a principal: the local index, or a running gateway with --url (ACLs apply either way).

    Each result shows its fact-check verdict; a note says when the fact-check fell back to
    non-RELEVANT results, skipped a stage (degraded) or withheld passages."""
    weights = None if bm25_weight is None else {"bm25": bm25_weight, "dense": 1.0 - bm25_weight}
    try:
        body = _search(query, tenant, user, groups, top_k, method, weights, url, api_key)
    except ValueError as exc:
        print_error(f"{exc}")
        raise typer.Exit(code=2) from exc
    except RampartError as exc:
        raise fail(server_hint(exc, load_settings())) from exc
    if as_json:
        out.print_json(json.dumps(body))
        return
    print_search(body)


def print_search(body: dict[str, Any]) -> None:
    """A search response as a table with each result's verdict, then what the table cannot show:
    a fact-check fallback, skipped stages and withheld passages."""
    hits: list[dict[str, Any]] = body["results"]
    table = Table(
        "#",
        "document",
        "section",
        "bm25",
        "dense",
        "fused",
        "verdict",
        "text",
        title=f"“{escape(body['query'])}”",
    )
    for h in hits:
        s = h["scores"]
        table.add_row(
            str(h["rank"]),
            escape(h["doc_id"]),
            escape(" > ".join(h["section_path"])),
            f"{s['bm25']:.2f}" if s.get("bm25") is not None else "-",
            f"{s['dense']:.3f}" if s.get("dense") is not None else "-",
            f"{h['fused']:.3f}",
            _verdict_cell(h.get("verdict")),
            escape(h["text"][:160].replace("\n", " ")) + "…",
        )
    out.print(table)
    if not hits:
        out.print("[yellow]no results[/yellow] (nothing matches, or this principal may not read what does)")
    if body.get("factcheck_fallback"):
        out.print(
            "[yellow]note[/yellow]: fact-check fallback: too few results were judged RELEVANT, so "
            "non-adversarial ones were re-admitted; trust only the rows marked relevant"
        )
    degraded: list[str] = body.get("degraded") or []
    if degraded:
        unverified = " (results are unverified)" if "factcheck" in degraded else ""
        out.print(f"[yellow]degraded[/yellow]: skipped {', '.join(degraded)}{unverified}", highlight=False)
    filtered: list[dict[str, Any]] = body.get("filtered") or []
    if filtered:
        kinds: dict[str, int] = {}
        for f in filtered:
            kinds[f["verdict"]] = kinds.get(f["verdict"], 0) + 1
        counted = ", ".join(f"{n} {v}" for v, n in sorted(kinds.items()))
        out.print(
            f"{len(filtered)} passage(s) withheld by the fact-check ({counted}); --json lists them with reasons",
            highlight=False,
        )


def _verdict_cell(verdict: dict[str, Any] | None) -> str:
    if verdict is None:
        return "[dim]not judged[/dim]"
    v = Verdict(verdict["verdict"])
    return f"[{VERDICT_STYLE[v]}]{v.value}[/] {verdict['score']:.2f}"


def _search(
    query: str,
    tenant: str,
    user: str,
    groups: str,
    top_k: int,
    method: FusionMethod | None,
    weights: dict[str, float] | None,
    url: str | None,
    api_key: str | None,
) -> dict[str, Any]:
    """The search response as the HTTP API returns it, from the server (``--url``) or the local index."""
    if url:
        from services.cli.remote import RemoteGateway

        if not api_key:
            raise ValueError("--url needs --api-key (or RAMPART_API_KEY); the key decides the principal")
        remote = RemoteGateway(url, api_key)
        try:
            fusion = {k: v for k, v in {"method": method, "weights": weights}.items() if v is not None}
            return remote.search(query, top_k, fusion or None, tenant or None)
        finally:
            remote.close()
    from services.orchestrator.runtime import Runtime
    from services.orchestrator.serving.responses import to_search_response

    if not tenant:
        raise ValueError("--tenant is required when searching the local index (or use --url with an API key)")
    who = Principal(tenant=tenant, user=user, groups=split_csv(groups), scopes=["search"])
    runtime = Runtime.open(load_settings())
    try:
        params = runtime.search.params(top_k=top_k, method=method, weights=weights)
        outcome = runtime.search.search(query, who, params)
    finally:
        runtime.close()
    return to_search_response(query, outcome).model_dump(mode="json")


# ---- eval ------------------------------------------------------------------------------------------
@eval_app.command("retrieval")
def evaluate(
    data_dir: Annotated[
        Path,
        typer.Argument(
            help="A BEIR folder (corpus.jsonl, queries.jsonl, qrels/<split>.tsv), or a name under RAMPART_EVAL_DATA_DIR"
        ),
    ],
    split: Annotated[str, typer.Option(help="qrels split to score (tune on train, report test)")] = "test",
    pipelines: Annotated[
        str, typer.Option(help="Comma-separated pipelines")
    ] = "bm25,dense,hybrid-minmax,hybrid-zscore,hybrid-rrf",
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the report as JSON here")] = None,
    png_out: Annotated[Path | None, typer.Option("--png", help="Bar chart (default: next to --json)")] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Index cache (default <data_dir setting>/eval-cache)")
    ] = None,
    query_split: Annotated[
        str, typer.Option(help="all, or train/heldout: the fixed halves of a single-split set (HotpotQA-500)")
    ] = "all",
    rerank_depth: Annotated[
        int | None, typer.Option(min=1, help="Chunks reranked by +rerank pipelines (default: rerank.depth)")
    ] = None,
    profile: Annotated[CorpusProfile | None, PROFILE_OPTION] = None,
) -> None:
    """Index a BEIR dataset (cached by content hash) and report nDCG@10, Recall@100, MRR@10, latency.

    Pipelines: bm25, dense, hybrid-<minmax|zscore|rrf>[:W]; append +rerank (cross-encoder order) or
    +rerank-fused (blended with the first-stage score), e.g. hybrid-minmax+rerank-fused; chain[:B]
    runs chain-of-retrieval with B beams (docs/chain.md). Also reports recall@10, all_supporting@k
    and retrieval calls per query.
    """

    from services.evaluation.beir import load_beir
    from services.evaluation.runner import (
        PipelineSpec,
        eval_report,
        eval_reranker,
        evaluate_pipelines,
        with_profile,
    )
    from services.retrieval.embedder import build_embedder

    settings = with_profile(load_settings(), profile)
    if rerank_depth is not None:
        settings = settings.model_copy(
            update={"rerank": settings.rerank.model_copy(update={"depth": rerank_depth})}
        )
    if query_split not in ("all", "train", "heldout"):
        raise typer.BadParameter(f"--query-split {query_split!r}: use all, train or heldout")
    try:
        dataset = load_beir(resolve_dataset(data_dir, settings), split).half(query_split)  # type: ignore[arg-type]
        specs = [PipelineSpec.parse(p.strip(), settings) for p in pipelines.split(",") if p.strip()]
        embedder = build_embedder(settings.embedding, settings.models_dir)
        reranker = eval_reranker(specs, settings)
        with progress_bar() as bar:
            summary, per_query, info = evaluate_pipelines(
                dataset,
                settings,
                embedder,
                specs,
                cache_dir or settings.data_dir / "eval-cache",
                reranker=reranker,
                progress=task_updater(bar),
            )
    except RampartError as exc:
        raise fail(exc) from exc
    report = eval_report(
        dataset,
        settings,
        specs,
        summary=summary,
        per_query=per_query,
        info=info,
        reranker=reranker,
        split=split,
        command="rampart " + " ".join(sys.argv[1:]),
    )
    _print_eval(report, failed=info.get("failed", 0))
    _write_eval(report, json_out, png_out)


def _print_eval(report: EvalReport, *, failed: int) -> None:
    """The metrics table, one line per paired test, and the corpus documents the index lacks."""
    from services.evaluation.report import render_table

    out.print(render_table(report))
    for sig in report.significance:
        out.print(sig.summary())
    if failed:
        console.print(f"[yellow]{failed} corpus documents could not be indexed[/yellow]")


def _write_eval(report: EvalReport, json_out: Path | None, png_out: Path | None) -> None:
    """The report as JSON and its bar chart (next to the JSON unless --png says where), or the chart alone."""
    from services.evaluation.report import plot_bars, write_json

    if json_out:
        write_json(report, json_out)
        png = png_out or json_out.with_suffix(".png")
        plot_bars(report, png)
        console.print(f"wrote {json_out} and {png}")
    elif png_out:
        plot_bars(report, png_out)


# ---- keys ------------------------------------------------------------------------------------------
@keys_app.command("create")
def keys_create(
    tenant: Annotated[str, typer.Option(help="Tenant the key belongs to (it can reach no other)")],
    user: Annotated[str, typer.Option(help="User the key acts as (ACLs name users)")],
    groups: Annotated[str, typer.Option(help="Comma-separated groups")] = "",
    scopes: Annotated[str, typer.Option(help="search, ingest, admin (comma-separated)")] = "search",
    label: Annotated[str, typer.Option(help="A note shown by `rampart keys list`")] = "",
    expires_days: Annotated[
        float | None, typer.Option(help="Days until the key stops working (default: never)")
    ] = None,
    source: Annotated[
        str | None,
        typer.Option(help="A connector's source namespace: documents it writes must have a source under it"),
    ] = None,
    trust: Annotated[
        str, typer.Option(help="'untrusted': its documents face the fact-check's stricter bar")
    ] = "",
) -> None:
    """Create an API key; it is printed once (stdout) and only its hash is stored."""
    from services.gateway.api_keys import ApiKeyStore

    settings = load_settings()
    store = ApiKeyStore.from_settings(settings)
    not_after = None if expires_days is None else time.time() + expires_days * 86400
    try:
        who = Principal(tenant=tenant, user=user, groups=split_csv(groups), scopes=split_csv(scopes))
        key, record = store.create(who, label=label, not_after=not_after, source=source, trust=trust)
    except ValueError as exc:
        print_error(f"{exc}")
        raise typer.Exit(code=2) from exc
    except RampartError as exc:
        raise fail(exc) from exc
    console.print(f"created key {record.id} for {tenant}/{user}; store it now, it is not shown again:")
    out.print(key, highlight=False)


@keys_app.command("list")
def keys_list() -> None:
    """List the API keys (id, principal, scopes, revoked); the keys themselves are never stored."""
    from services.gateway.api_keys import ApiKeyStore

    settings = load_settings()
    table = Table("id", "tenant", "user", "groups", "scopes", "label", "created", "expires", "state")
    for k in ApiKeyStore.from_settings(settings).list():
        p = k.principal
        state = "revoked" if k.revoked else "expired" if k.expired() else "active"
        if k.replaced_by and state == "active":
            state = f"active, replaced by {k.replaced_by}"
        table.add_row(
            k.id,
            p.tenant,
            p.user,
            ",".join(p.groups),
            ",".join(p.scopes),
            k.label,
            time.strftime("%Y-%m-%d %H:%M", time.localtime(k.created_at)),
            time.strftime("%Y-%m-%d %H:%M", time.localtime(k.not_after)) if k.not_after else "",
            state,
        )
    out.print(table)


@keys_app.command("rotate")
def keys_rotate(
    key_id: Annotated[str, typer.Argument(help="The key's id, from `rampart keys list`")],
    overlap_hours: Annotated[
        float, typer.Option(help="How long the old key keeps working while clients switch (0: at once)")
    ] = 24.0,
) -> None:
    """Replace a key with a new one for the same principal; the old one expires after the overlap."""
    from services.gateway.api_keys import ApiKeyStore

    settings = load_settings()
    try:
        key, record = ApiKeyStore.from_settings(settings).rotate(key_id, overlap_s=overlap_hours * 3600)
    except RampartError as exc:
        raise fail(exc) from exc
    console.print(
        f"rotated {key_id} -> {record.id} (the old key works for {overlap_hours:g} more hours); "
        "store the new key now, it is not shown again:"
    )
    out.print(key, highlight=False)


@keys_app.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(help="The key's id, from `rampart keys list`")],
) -> None:
    """Revoke an API key: the server refuses it from its next request on."""
    from services.gateway.api_keys import ApiKeyStore

    settings = load_settings()
    if not ApiKeyStore.from_settings(settings).revoke(key_id):
        print_error(f"no key {key_id!r}; see `rampart keys list`")
        raise typer.Exit(code=2)
    out.print(f"revoked {key_id}")


# ---- demo ------------------------------------------------------------------------------------------
DEMO_PRINCIPALS = [
    ("acme", "alice", "eng", "search"),
    ("acme", "bob", "hr", "search"),
    ("acme", "carol", "exec,finance", "search"),
    ("acme", "dana", "", "search"),
    ("acme", "admin", "", "search,ingest,admin"),  # admin: it may replace documents of any ACL
    ("globex", "erin", "ops", "search"),
    ("globex", "frank", "finance", "search"),
]


@demo_app.command("seed")
def demo_seed(
    samples: Annotated[Path, typer.Option(help="The samples folder (one subfolder per tenant)")] = Path(
        "samples"
    ),
) -> None:
    """Ingest samples/<tenant>/ for each tenant and create demo API keys (once) in <data_dir>/demo-keys.env."""
    from services.gateway.api_keys import ApiKeyStore

    settings = load_settings()
    for tenant_dir in sorted(p for p in samples.iterdir() if p.is_dir()):
        try:
            ingest([tenant_dir], tenant=tenant_dir.name)
        except typer.Exit as exc:
            if exc.exit_code not in (0, None):
                raise
    keys_file = settings.data_dir / "demo-keys.env"
    if keys_file.exists():
        console.print(f"demo keys already in {keys_file}")
        return
    store = ApiKeyStore.from_settings(settings)
    lines = []
    for tenant, user, groups, scopes in DEMO_PRINCIPALS:
        key, _ = store.create(
            Principal(tenant=tenant, user=user, groups=split_csv(groups), scopes=split_csv(scopes)),
            label="demo",
        )
        lines.append(f"{tenant.upper()}_{user.upper()}_KEY={key}")
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(keys_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    console.print(f"demo API keys written to {keys_file} (mode 600); try:")
    example = (
        f'. {keys_file} && curl -s -H "Authorization: Bearer $ACME_ALICE_KEY" '
        "-H 'content-type: application/json' -d '{\"query\": \"how many vacation days do I get\"}' "
        "http://127.0.0.1:8080/v1/search"
    )
    console.print(example, soft_wrap=True, highlight=False, markup=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
