"""``rampart bench stack``: the latency the distributed stack adds over the embedded gateway.

The same documents and the same requests, over HTTP both times: first through the stack (gateway →
Ray Serve orchestrator → gRPC retrieval service, Triton rerank, Celery fact-check workers) started
under supervisord on free ports in a temporary data directory; then, the stack stopped, through the
embedded gateway (``create_app(Runtime.open(settings), keys)`` served by uvicorn in this process).
One client, sequential, after a warm-up: this measures added latency, not throughput. A bounded
locust run against the stack (``locustfile.py``) gives throughput under concurrent users.

Rerank score and fact-check evidence caches are off in both modes (a repeated query is timed doing
the work) and the gateway's rate limit is off (locust would hit it). Ray binds every interface: run
the bench in a loopback-only network namespace (``python -m tests.e2e.isolated rampart bench stack``).
"""

from __future__ import annotations

import contextlib
import csv
import io
import itertools
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from services.common.errors import ErrorCode, RampartError
from services.common.settings import RampartSettings
from services.common.types import EVERYONE, Acl, Document, Principal
from services.evaluation.beir import BeirDataset, iter_corpus, load_beir
from services.evaluation.metrics import latency_ms_p50, latency_ms_p95
from services.evaluation.runner import Progress

BENCH_TENANT = "bench"
ENDPOINTS = ("search", "answer")
MODES = ("stack", "embedded")
GOAL_RATIO = 1.3
"""Stack p50 / embedded p50 the distributed stack should stay under (issue 6)."""
LOCUSTFILE = Path(__file__).with_name("locustfile.py")
# The example questions of samples/README.md: a folder corpus has no query file of its own.
SAMPLE_QUERIES = (
    "How many weeks of parental leave does a primary caregiver get?",
    "What is the hotel cap per night in high-cost cities?",
    "Who must approve an expense claim above 5,000 USD?",
    "What is the maximum payload of the Acme R7?",
    "How long is the R7 warranty?",
    "How many days can I work from a country without an Acme entity?",
    "How much is the on-call stipend for a primary week?",
    "Who can downgrade a SEV1 incident?",
    "What is the salary range for a Staff Engineer (L5)?",
    "What price are we paying for Lumen Vision?",
    "How much is my relocation allowance?",
    "What is the maximum floor stacking height for pallets?",
    "What is the on-time target for Express shipments?",
    "How long does a shipper have to claim concealed damage?",
    "How long must a driver rest after 4.5 hours of driving?",
    "Can lithium batteries (UN3480) go on Express?",
    "How far in advance must dock appointments be booked?",
    "What is the Gold tier rate per pallet?",
    "How do I set up the VPN?",
    "What is the VPN password?",
)


@dataclass(frozen=True)
class BenchCorpus:
    name: str
    documents: list[Document]
    queries: list[str]


@dataclass(frozen=True)
class BenchOptions:
    queries: int = 50
    warmup: int = 5
    top_k: int = 10
    locust_seconds: int = 60
    locust_users: int = 4
    locust_spawn_rate: float = 4.0


# ---- corpus ----------------------------------------------------------------------------------------
def beir_corpus(dataset: BeirDataset, docs: int) -> BenchCorpus:
    """The first ``docs`` documents of a BEIR folder, shared with the whole bench tenant; its queries."""
    documents = [
        Document(
            id=d.doc_id,
            tenant=BENCH_TENANT,
            acl=Acl(groups=[EVERYONE]),
            title=d.title,
            text=d.text or d.title,
            content_type="text/plain",
        )
        for d in itertools.islice(iter_corpus(dataset.path), docs)
        if (d.text or d.title).strip()
    ]
    return BenchCorpus(dataset.name, documents, list(dataset.queries.values()))


def folder_corpus(root: Path, docs: int) -> BenchCorpus:
    """Every supported file under ``root`` (sidecar ACLs kept, ids relative to ``root``), up to ``docs``;
    the queries are :data:`SAMPLE_QUERIES` (written for ``samples/``; any text times the same work)."""
    from services.ingest.files import discover, load

    documents: list[Document] = []
    for base, path in discover([root]):
        loaded = load(base, path, tenant=BENCH_TENANT, default_acl=Acl(groups=[EVERYONE]))
        if loaded.document is None:
            raise RampartError(
                ErrorCode.INVALID_ARGUMENT, f"cannot load {path}: {loaded.error}", path=str(path)
            )
        documents.append(loaded.document)
        if len(documents) >= docs:
            break
    if not documents:
        raise RampartError(
            ErrorCode.INVALID_ARGUMENT,
            f"no supported documents under {root}; give a BEIR folder (corpus.jsonl) or a folder of "
            ".txt/.md/.html/.pdf/.docx files",
            path=str(root),
        )
    return BenchCorpus(root.resolve().name, documents, list(SAMPLE_QUERIES))


def bench_corpus(path: Path, docs: int, split: str) -> BenchCorpus:
    """What ``rampart bench stack`` ingests and asks: a BEIR folder (it has ``corpus.jsonl``; queries
    of its ``split``) or a folder of files, the first ``docs`` documents either way."""
    if (path / "corpus.jsonl").exists():
        return beir_corpus(load_beir(path, split), docs)
    return folder_corpus(path, docs)


def bench_principal(documents: Sequence[Document]) -> Principal:
    """A reader of every document: each group and user named in an ACL (restricted ones included)."""
    groups = sorted({g for d in documents for g in d.acl.groups} | {EVERYONE})
    return Principal(tenant=BENCH_TENANT, user="bench", groups=groups, scopes=["search", "ingest"])


def take_queries(queries: Sequence[str], n: int) -> list[str]:
    """``n`` queries, cycling when there are fewer (the caches are off, so a repeat does the work)."""
    if not queries:
        raise RampartError(ErrorCode.INVALID_ARGUMENT, "the corpus has no queries to time")
    return list(itertools.islice(itertools.cycle(queries), n))


# ---- figures ---------------------------------------------------------------------------------------
def summarize(values_ms: Sequence[float]) -> dict[str, float]:
    """p50/p95/mean (ms, 2 decimals) and the count of one series."""
    if not values_ms:
        raise ValueError("no timings to summarize")
    return {
        "p50_ms": round(latency_ms_p50(values_ms), 2),
        "p95_ms": round(latency_ms_p95(values_ms), 2),
        "mean_ms": round(float(np.mean(values_ms)), 2),
        "n": float(len(values_ms)),
    }


def ratios(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Stack p50 / embedded p50 per endpoint (rows as :func:`run_stack_bench` makes them)."""
    p50 = {(r["mode"], r["endpoint"]): float(r["p50_ms"]) for r in rows}
    return {
        e: round(p50[("stack", e)] / p50[("embedded", e)], 3)
        for e in ENDPOINTS
        if ("stack", e) in p50 and p50.get(("embedded", e))
    }


def stage_medians(per_request: Sequence[Mapping[str, float]]) -> dict[str, float]:
    """Median ms of each pipeline stage over the requests that report it (``timings_ms`` of the
    responses): which stage the stack's extra latency sits in."""
    values: dict[str, list[float]] = {}
    for timings in per_request:
        for stage, ms in timings.items():
            values.setdefault(stage, []).append(float(ms))
    return {stage: round(float(np.median(v)), 2) for stage, v in sorted(values.items())}


def paired_added_ms(stack_ms: Sequence[float], embedded_ms: Sequence[float]) -> float:
    """Median of per-query differences (stack − embedded) of an interleaved run, in query order."""
    if len(stack_ms) != len(embedded_ms) or not stack_ms:
        raise ValueError(f"need two equal, non-empty series (got {len(stack_ms)} and {len(embedded_ms)})")
    return round(float(np.median(np.subtract(stack_ms, embedded_ms))), 2)


def locust_command(
    host: str, csv_prefix: Path, *, seconds: int, users: int, spawn_rate: float, locust: Path | None = None
) -> list[str]:
    """A bounded, headless locust run of :data:`LOCUSTFILE` against ``host``: CSV files (failure messages)
    and the final JSON stats (the figures) next to ``csv_prefix``."""
    binary = locust or Path(sys.executable).with_name("locust")
    return [
        str(binary),
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "--only-summary",
        "-u",
        str(users),
        "-r",
        f"{spawn_rate:g}",
        "-t",
        f"{seconds}s",
        "--stop-timeout",
        "30",
        "--host",
        host,
        "--csv",
        str(csv_prefix),
        "--json-file",
        f"{csv_prefix}_final",
    ]


def percentile_from_histogram(histogram: Mapping[float, int], percent: float) -> float:
    """Locust's percentile of a ``{rounded ms: count}`` histogram: the smallest bucket with at least
    ``percent`` of the requests at or below it."""
    total = sum(histogram.values())
    if total == 0:
        return 0.0
    wanted = int(total * percent)
    seen = 0
    for value in sorted(histogram, reverse=True):
        seen += histogram[value]
        if total - seen <= wanted:
            return float(value)
    return 0.0


def parse_locust_json(text: str) -> dict[str, float]:
    """Final figures from locust's ``--json-file`` (every request of the run; the ``_stats.csv`` is a
    snapshot up to a second old): requests, failures, requests/s, p50/p95 and mean (ms; locust rounds
    response times above 100 ms to two significant digits)."""
    entries = json.loads(text)
    histogram: dict[float, int] = {}
    for entry in entries:
        for value, count in entry["response_times"].items():
            histogram[float(value)] = histogram.get(float(value), 0) + int(count)
    requests = sum(int(e["num_requests"]) for e in entries)
    if not requests:
        raise RampartError(ErrorCode.INTERNAL, "locust sent no request; is the gateway answering?")
    span = max(e["last_request_timestamp"] or 0 for e in entries) - min(e["start_time"] for e in entries)
    return {
        "requests": float(requests),
        "failures": float(sum(int(e["num_failures"]) for e in entries)),
        "requests_per_s": round(requests / span, 2) if span > 0 else 0.0,
        "p50_ms": percentile_from_histogram(histogram, 0.50),
        "p95_ms": percentile_from_histogram(histogram, 0.95),
        "mean_ms": round(sum(float(e["total_response_time"]) for e in entries) / requests, 2),
    }


def parse_locust_failures(text: str, limit: int = 3) -> list[str]:
    """The first failure messages of ``<prefix>_failures.csv`` with their counts."""
    return [
        f"{row['Method']} {row['Name']}: {row['Error']} (x{row['Occurrences']})"
        for row in itertools.islice(csv.DictReader(io.StringIO(text)), limit)
    ]


# ---- the environment of one bench ------------------------------------------------------------------
def bench_env(work: Path, models_dir: Path, port: Callable[[], int]) -> dict[str, str]:
    """``RAMPART_*`` variables for both modes: private ports and directories, caches and rate limit off."""
    ports = {
        name: str(port())
        for name in (
            "GATEWAY__PORT",
            "SERVE__PORT",
            "SERVE__METRICS_PORT",
            "STACK__WORKER_METRICS_PORT",
            "RETRIEVAL_SERVICE__PORT",
            "RETRIEVAL_SERVICE__METRICS_PORT",
            "INGEST_SERVICE__PORT",
            "INGEST_SERVICE__METRICS_PORT",
            "STACK__REDIS_PORT",
            "STACK__TRITON_GRPC_PORT",
            "STACK__TRITON_HTTP_PORT",
            "STACK__TRITON_METRICS_PORT",
        )
    }
    return {
        **{f"RAMPART_{k}": v for k, v in ports.items()},
        "RAMPART_DATA_DIR": str(work / "stack-data"),
        "RAMPART_MODELS_DIR": str(models_dir.resolve()),
        "RAMPART_STACK__DIR": str(work / "stack"),
        "RAMPART_GATEWAY__RATE_LIMIT_PER_MINUTE": "0",
        "RAMPART_RERANK__CACHE_SIZE": "0",
        "RAMPART_FACTCHECK__CELERY__CACHE_TTL_S": "0",
        "RAY_TMPDIR": str(work / "ray"),
    }


@contextlib.contextmanager
def bench_folder(
    prefix: str, say: Callable[[str], None], logs: str = "stack/logs/<program>.log"
) -> Iterator[Path]:
    """A short ``/tmp/<prefix>*`` folder for a bench's stack (unix socket paths stay under 108 bytes):
    removed when the bench finishes, kept and named for its ``logs`` when it fails."""
    work = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    try:
        yield work
    except BaseException:
        say(f"kept {work} for its logs ({logs}); remove it when done")
        raise
    shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def environ(overrides: Mapping[str, str]) -> Iterator[None]:
    """Set variables for the duration (the stack's programs inherit them), then restore the old ones."""
    saved = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ---- running ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Target:
    """A gateway to time: ``stack`` or ``embedded``, its base URL and the bench's API key on it."""

    mode: str
    url: str
    key: str


def run_stack_bench(
    corpus: BenchCorpus,
    settings: RampartSettings,
    options: BenchOptions,
    *,
    interleave: bool = False,
    progress: Progress | None = None,
    started: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Rows ``{mode, endpoint, p50_ms, p95_ms, mean_ms, n, degraded}``, the stack/embedded p50 ratios,
    start/ingest times and the locust figures (None when ``locust_seconds`` is 0).

    By default the stack is timed, stopped, and the embedded gateway timed after it; ``interleave``
    keeps both up and alternates them request by request (rotating which goes first), so load from
    other processes drifting during the run hits both alike — the idle stack's background work (Ray
    and Celery heartbeats) then runs on the embedded side's clock too.
    Both modes read their settings from the environment, as the stack's programs do, plus
    :func:`bench_env`; of ``settings`` only ``models_dir`` is used (the stack needs an absolute one)."""
    from services.common.net import free_port

    say = started or (lambda _msg: None)
    queries = take_queries(corpus.queries, options.queries + options.warmup)
    principal = bench_principal(corpus.documents)
    record: dict[str, Any] = {"corpus": corpus.name, "docs": len(corpus.documents), "interleaved": interleave}
    rows: list[dict[str, Any]] = []
    locust: dict[str, Any] | None = None
    with bench_folder("rsb-", say) as work:
        (work / "ray").mkdir()
        env = bench_env(work, settings.models_dir, free_port)
        embedded_env = {**env, "RAMPART_DATA_DIR": str(work / "embedded-data")}
        say("starting the stack …")
        with _running_stack(env, principal, work, record) as stack:
            if interleave:
                say("stack ready; opening the embedded gateway beside it …")
                with _running_embedded(embedded_env, principal) as embedded:
                    rows += _measure([stack, embedded], corpus, queries, options, record, progress)
                    locust = _locust(stack, queries, options, work, say)
            else:
                rows += _measure([stack], corpus, queries, options, record, progress)
                locust = _locust(stack, queries, options, work, say)
        if not interleave:
            say("stack stopped; opening the embedded gateway …")
            with _running_embedded(embedded_env, principal) as embedded:
                rows += _measure([embedded], corpus, queries, options, record, progress)
    record.update(
        queries=options.queries,
        warmup=options.warmup,
        top_k=options.top_k,
        rows=sorted(rows, key=lambda r: (MODES.index(r["mode"]), ENDPOINTS.index(r["endpoint"]))),
        ratios=ratios(rows),
        goal_ratio=GOAL_RATIO,
        locust=locust,
    )
    return record


@contextlib.contextmanager
def _running_stack(
    env: Mapping[str, str], principal: Principal, work: Path, record: dict[str, Any]
) -> Iterator[Target]:
    """Launch the stack with ``env`` (supervisord and its programs inherit it), wait until every stage
    is ready, yield its gateway; always shut it down."""
    from services.gateway.api_keys import ApiKeyStore
    from services.stack.control import running_stack
    from services.stack.plan import Addresses

    t0 = time.perf_counter()
    with contextlib.ExitStack() as running:
        with environ(env):  # supervisord and every program inherit it at launch
            settings = RampartSettings()
            key = ApiKeyStore.from_settings(settings).create(principal, label="bench")[0]
            running.enter_context(running_stack(settings, Path.cwd(), log=work / "supervisord.out"))
        record["stack_ready_s"] = round(time.perf_counter() - t0, 1)
        yield Target("stack", Addresses.of(settings).gateway_url, key)


@contextlib.contextmanager
def _running_embedded(env: Mapping[str, str], principal: Principal) -> Iterator[Target]:
    """The embedded gateway over its own data directory, served by uvicorn in this process."""
    from services.gateway.api_keys import ApiKeyStore
    from services.gateway.app import create_app
    from services.orchestrator.runtime import Runtime

    with environ(env):
        settings = RampartSettings()
    keys = ApiKeyStore.from_settings(settings)
    key = keys.create(principal, label="bench")[0]
    runtime = Runtime.open(settings)
    try:
        runtime.orchestrator  # noqa: B018  (built at start-up, as `rampart serve` does)
        with _uvicorn(create_app(runtime, keys)) as url:
            yield Target("embedded", url, key)
    finally:
        runtime.close()


def _locust(
    stack: Target, queries: list[str], options: BenchOptions, work: Path, say: Callable[[str], None]
) -> dict[str, Any] | None:
    if options.locust_seconds <= 0:
        return None
    say(f"locust: {options.locust_users} users for {options.locust_seconds} s against the stack …")
    return run_locust(stack.url, stack.key, queries, options, work / "locust")


@contextlib.contextmanager
def _uvicorn(app: Any) -> Iterator[str]:
    """Serve ``app`` on a free 127.0.0.1 port in a thread; yield its base URL; stop it."""
    import uvicorn

    from services.common.net import free_port

    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_config=None, access_log=False)
    )
    thread = threading.Thread(target=server.run, name="bench-gateway", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RampartError(
                ErrorCode.UNAVAILABLE, f"the embedded gateway did not start on 127.0.0.1:{port}"
            )
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def _client(base_url: str, key: str) -> httpx.Client:
    return httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=300.0)


def _post(client: httpx.Client, path: str, body: dict[str, Any], mode: str) -> dict[str, Any]:
    r = client.post(path, json=body)
    if r.status_code != 200:
        raise RampartError(
            ErrorCode.UNAVAILABLE,
            f"{mode} gateway answered {path} with HTTP {r.status_code}: {r.text[:300]}",
            mode=mode,
            path=path,
        )
    return dict(r.json())


def _ingest(
    client: httpx.Client, documents: Sequence[Document], mode: str, progress: Progress | None
) -> float:
    """Ingest through the gateway (batches of 32); seconds taken. Every document must end indexed."""
    t0 = time.perf_counter()
    for i in range(0, len(documents), 32):
        batch = documents[i : i + 32]
        body = {"documents": [d.model_dump(mode="json", exclude_none=True) for d in batch]}
        result = _post(client, "/v1/documents", body, mode)
        if result["failed"]:
            failed = [f"{r['id']}: {r.get('error')}" for r in result["results"] if r.get("error")][:3]
            raise RampartError(
                ErrorCode.INTERNAL, f"{mode}: {result['failed']} document(s) failed to ingest: {failed}"
            )
        if progress:
            progress(f"{mode} ingest", i + len(batch), len(documents))
    return round(time.perf_counter() - t0, 2)


def _measure(
    targets: list[Target],
    corpus: BenchCorpus,
    queries: list[str],
    options: BenchOptions,
    record: dict[str, Any],
    progress: Progress | None,
) -> list[dict[str, Any]]:
    """Ingest into each target (``<mode>_ingest_s``), then time each endpoint: every query on every
    target in turn, the order rotating so no target always goes first; warm-up requests untimed."""
    with contextlib.ExitStack() as stack:
        clients = {t.mode: stack.enter_context(_client(t.url, t.key)) for t in targets}
        for mode, client in clients.items():
            record[f"{mode}_ingest_s"] = _ingest(client, corpus.documents, mode, progress)
        label = "+".join(clients)
        timings: dict[tuple[str, str], list[float]] = {}
        stages: dict[tuple[str, str], list[dict[str, float]]] = {}
        degraded: dict[tuple[str, str], int] = {}
        for endpoint in ENDPOINTS:
            for n, query in enumerate(queries):
                shift = n % len(targets)
                for mode in [t.mode for t in targets[shift:] + targets[:shift]]:
                    t0 = time.perf_counter()
                    body = _post(
                        clients[mode], f"/v1/{endpoint}", {"query": query, "top_k": options.top_k}, mode
                    )
                    elapsed = (time.perf_counter() - t0) * 1000
                    if n >= options.warmup:
                        timings.setdefault((mode, endpoint), []).append(elapsed)
                        stages.setdefault((mode, endpoint), []).append(dict(body.get("timings_ms") or {}))
                        degraded[(mode, endpoint)] = degraded.get((mode, endpoint), 0) + bool(
                            body.get("degraded")
                        )
                if progress:
                    progress(f"{label} {endpoint}", n + 1, len(queries))
    if len(clients) == 2:  # the same query moments apart: per-query differences are the steadier figure
        record["paired_added_p50_ms"] = {
            e: paired_added_ms(timings[("stack", e)], timings[("embedded", e)]) for e in ENDPOINTS
        }
    return [
        {
            "mode": mode,
            "endpoint": endpoint,
            **summarize(values),
            "degraded": degraded[(mode, endpoint)],
            "stages_p50_ms": stage_medians(stages[(mode, endpoint)]),
        }
        for (mode, endpoint), values in timings.items()
    ]


def run_locust(
    host: str, key: str, queries: Sequence[str], options: BenchOptions, out_dir: Path
) -> dict[str, Any]:
    """A headless locust run of ``/v1/search`` (the API key and queries go to it in its environment)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    prefix = out_dir / "run"
    argv = locust_command(
        host,
        prefix,
        seconds=options.locust_seconds,
        users=options.locust_users,
        spawn_rate=options.locust_spawn_rate,
    )
    env = {
        **os.environ,
        "RAMPART_BENCH_API_KEY": key,
        "RAMPART_BENCH_QUERIES": json.dumps(list(queries)),
        "RAMPART_BENCH_TOP_K": str(options.top_k),
    }
    try:
        done = subprocess.run(  # noqa: S603 - our venv's locust, argument list
            argv, env=env, capture_output=True, text=True, timeout=options.locust_seconds + 120, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise RampartError(
            ErrorCode.DEADLINE_EXCEEDED, f"locust did not finish within {options.locust_seconds + 120}s"
        ) from exc
    stats_file = prefix.with_name("run_final.json")
    if not stats_file.exists():
        raise RampartError(
            ErrorCode.INTERNAL,
            f"locust exited {done.returncode} without stats; its output ends:\n{done.stderr[-1500:]}",
        )
    figures: dict[str, Any] = parse_locust_json(stats_file.read_text())
    failures_file = prefix.with_name("run_failures.csv")
    figures["failure_examples"] = (
        parse_locust_failures(failures_file.read_text()) if failures_file.exists() else []
    )
    figures.update(
        users=options.locust_users, spawn_rate=options.locust_spawn_rate, seconds=options.locust_seconds
    )
    return figures
