"""``rampart bench scale``: /v1/search throughput and p95 of the stack on OpenSearch with 1, 2, …
pipeline replicas (docs/opensearch.md, "Scale-out"); ``rampart bench autoscale``: Serve's autoscaler
adding pipeline replicas under load and removing them after (below).

For each replica count, one after another: a private stack (free ports, a temporary directory, its own
API key) on one OpenSearch node — started by the bench on a free port, or ``RAMPART_OPENSEARCH__URL`` —
with ``serve.pipeline_min_replicas = pipeline_max_replicas = N`` (no autoscaling during the run, so the
count is the one measured) and ``stack.replicas`` retrieval replicas and ingest workers; the corpus is
ingested once, into an index prefix the runs share; warm-up searches; then the same bounded locust run
as ``rampart bench stack`` (closed loop: users post ``/v1/search`` back to back). Caches and the rate
limit are off (:func:`~services.evaluation.stack_bench.bench_env`), so every request does the work.

Ray binds every interface: run it in a loopback-only network namespace,
``python -m tests.e2e.isolated rampart bench scale``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.common.settings import RampartSettings
from services.evaluation.runner import Progress
from services.evaluation.stack_bench import (
    BenchCorpus,
    BenchOptions,
    _client,
    _ingest,
    _post,
    _running_stack,
    bench_env,
    bench_folder,
    bench_principal,
    run_locust,
    take_queries,
)

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds) of a live process, from ``/proc/<pid>/stat``: its own user + system
    time and that of its children it has reaped (a live child is counted on its own)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return int(fields[1]), sum(int(f) for f in fields[11:15]) / TICKS  # utime stime cutime cstime


def cpu_seconds(roots: dict[str, int]) -> dict[str, float]:
    """CPU seconds used so far by each named process and all its descendants (a program and the Ray
    workers, parser and prefork children it started). A descendant that exited counts once its parent
    has reaped it (in the parent's figure); one that exited unreaped in between is missed."""
    stats: dict[int, tuple[int, float]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = st
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[str, float] = {}
    for name, root in roots.items():
        total, todo = 0.0, [root]
        while todo:
            pid = todo.pop()
            if pid in stats:
                total += stats[pid][1]
                todo += children.get(pid, [])
        out[name] = round(total, 2)
    return out


@contextlib.contextmanager
def opensearch_node(
    settings: RampartSettings, work: Path, say: Callable[[str], None]
) -> Iterator[tuple[str, int | None]]:
    """``opensearch.url`` when set, else a node of the bench's own on a free port (stopped after);
    yields its URL and, for the bench's own, the JVM's pid (its CPU is counted)."""
    if settings.opensearch.url:
        yield settings.opensearch.url, None
        return
    from services.common.net import free_port
    from services.retrieval.opensearch_node import OpenSearchNode

    say("starting an OpenSearch node …")
    node = OpenSearchNode(work / "opensearch", free_port(), heap_mb=settings.opensearch.heap_mb).start()
    try:
        yield node.url, node.proc.pid if node.proc is not None else None
    finally:
        node.stop()


def stack_programs(work: Path) -> list[Any]:
    """Each program's supervisord state (name, pid) in the stack under ``work``."""
    from services.stack.control import Supervisor

    return list(Supervisor((work / "stack").resolve()).states())


def run_scale_bench(
    corpus: BenchCorpus,
    settings: RampartSettings,
    options: BenchOptions,
    pipeline_replicas: Sequence[int],
    *,
    service_replicas: int = 1,
    progress: Progress | None = None,
    started: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """One locust run per entry of ``pipeline_replicas``; returns ``{runs: [{pipeline_replicas,
    stack_ready_s, locust: {requests, failures, requests_per_s, p50_ms, p95_ms, …}, cpu_s: {program:
    seconds during the run}, cpu_s_per_request}, …], …}``. The CPU figures are the stack's own, read
    from /proc: unlike requests/s they do not depend on what else the machine runs."""
    say = started or (lambda _msg: None)
    queries = take_queries(corpus.queries, max(options.queries, 1) + options.warmup)
    principal = bench_principal(corpus.documents)
    prefix = f"scale-{uuid.uuid4().hex[:8]}"
    record: dict[str, Any] = {
        "corpus": corpus.name,
        "docs": len(corpus.documents),
        "service_replicas": service_replicas,
        "users": options.locust_users,
        "seconds": options.locust_seconds,
        "cpus": os.cpu_count(),
    }
    runs: list[dict[str, Any]] = []
    with (
        bench_folder("rsc-", say, logs="p<N>-<i>/stack/logs/<program>.log") as work,
        opensearch_node(settings, work, say) as (url, jvm),
    ):
        for i, n in enumerate(pipeline_replicas):
            sub = work / f"p{n}-{i}"
            (sub / "ray").mkdir(parents=True)
            from services.common.net import free_port

            env = {
                **bench_env(sub, settings.models_dir, free_port),
                "RAMPART_INDEX__BACKEND": "opensearch",
                "RAMPART_OPENSEARCH__URL": url,
                "RAMPART_OPENSEARCH__INDEX_PREFIX": prefix,
                "RAMPART_STACK__REPLICAS": str(service_replicas),
                "RAMPART_STACK__REPLICA_PORT_STEP": "7",
                "RAMPART_SERVE__PIPELINE_MIN_REPLICAS": str(n),
                "RAMPART_SERVE__PIPELINE_MAX_REPLICAS": str(n),
            }
            run: dict[str, Any] = {"pipeline_replicas": n}
            say(f"starting the stack with {n} pipeline replica(s) …")
            with _running_stack(env, principal, sub, run) as stack:
                with _client(stack.url, stack.key) as client:
                    if i == 0:  # one index for every run: the later ones find it filled
                        run["ingest_s"] = _ingest(client, corpus.documents, "stack", progress)
                    for q in queries[: options.warmup]:
                        _post(client, "/v1/search", {"query": q, "top_k": options.top_k}, "stack")
                say(f"locust: {options.locust_users} users for {options.locust_seconds} s …")
                roots = {p.name: p.pid for p in stack_programs(sub) if p.pid > 0}
                if jvm is not None:
                    roots["opensearch"] = jvm
                before = cpu_seconds(roots)
                run["locust"] = run_locust(stack.url, stack.key, queries, options, sub / "locust")
                after = cpu_seconds(roots)
                used = {k: round(after[k] - before.get(k, 0.0), 2) for k in after}
                run["cpu_s"] = used
                done = run["locust"]["requests"]
                # CPU seconds the whole stack spent per request: what sizes a deployment (module doc)
                run["cpu_s_per_request"] = round(sum(used.values()) / done, 3) if done else None
            runs.append(run)
    record["runs"] = runs
    return record


def replica_deployment(title: str) -> str | None:
    """The Serve deployment a process title names (``ray::ServeReplica:<app>:<deployment>[.<method>]``,
    the method while it runs one), or None for any other process."""
    if not title.startswith("ray::ServeReplica:"):
        return None
    parts = title.removeprefix("ray::ServeReplica:").split(":")
    return parts[1].split(".", 1)[0] if len(parts) >= 2 and parts[1] else None


def serve_replicas(deployment: str = "PipelineDeployment") -> int:
    """Serve replicas of ``deployment`` alive on this host, read from process titles: what the autoscaler
    actually runs, read from outside without joining the cluster (Ray's token, a driver)."""
    n = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                title = (entry / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
            except OSError:
                continue
            n += replica_deployment(title) == deployment
    return n


@dataclass(frozen=True)
class AutoscalePlan:
    """``rampart bench autoscale``: Serve's pipeline between ``low`` and ``high`` replicas, ``idle_s`` of
    quiet, the locust run, then ``cool_s`` of quiet again (at least the downscale delay, plus Serve's
    few seconds to act, to see the replicas go); Serve's delays shortened so that a run takes minutes."""

    low: int = 1
    high: int = 2
    idle_s: float = 30.0
    cool_s: float = 120.0
    upscale_delay_s: float = 10.0
    downscale_delay_s: float = 60.0
    sample_every_s: float = 2.0


class ReplicaSampler:
    """Counts the pipeline's replicas every ``every_s`` in a thread: ``samples`` = (seconds since start,
    replicas)."""

    def __init__(self, every_s: float, count: Callable[[], int] = serve_replicas) -> None:
        self.every_s, self.count = every_s, count
        self.samples: list[tuple[float, int]] = []
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="replica-sampler", daemon=True)

    def now(self) -> float:
        return round(time.monotonic() - self.t0, 1)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((self.now(), self.count()))
            self._stop.wait(self.every_s)

    def __enter__(self) -> ReplicaSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def autoscale_summary(
    samples: Sequence[tuple[float, int]], load_start: float, load_end: float, low: int, high: int
) -> dict[str, Any]:
    """What the autoscaler did, from the samples: the most replicas under load, how long after the load
    began the first replica was added and the ceiling reached, how long after it ended the pipeline was
    back at the floor (None: never, within the run), and whether that is the behaviour asked for (up to
    ``high`` under load, back to ``low`` after; ``low`` before)."""

    def first(after: float, test: Callable[[int], bool]) -> float | None:
        return next((round(t - after, 1) for t, n in samples if t >= after and test(n)), None)

    before = [n for t, n in samples if t < load_start]
    during = [n for t, n in samples if load_start <= t <= load_end]
    up = first(load_start, lambda n: n > low)
    ceiling = first(load_start, lambda n: n >= high)
    down = next(
        (
            round(t - load_end, 1)
            for t, n in samples
            if t >= load_end and n <= low and all(m <= low for u, m in samples if u >= t)
        ),
        None,
    )
    return {
        "replicas_before": max(before, default=None),
        "replicas_max_under_load": max(during, default=None),
        "replicas_at_end": samples[-1][1] if samples else None,
        "first_added_after_s": up,
        "ceiling_after_s": ceiling,
        "back_to_floor_after_s": down,
        "as_asked": bool(
            before
            and max(before) <= low
            and ceiling is not None
            and ceiling <= load_end - load_start
            and down is not None
        ),
    }


def run_autoscale_bench(
    corpus: BenchCorpus,
    settings: RampartSettings,
    options: BenchOptions,
    plan: AutoscalePlan,
    *,
    progress: Progress | None = None,
    started: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """One private stack (the index behind the retrieval service, which every pipeline replica shares)
    with Serve autoscaling the pipeline from ``plan.low`` to ``plan.high``; quiet, the locust run, quiet;
    returns the replica count over time with :func:`autoscale_summary` and the locust figures."""
    say = started or (lambda _msg: None)
    queries = take_queries(corpus.queries, max(options.queries, 1) + options.warmup)
    with bench_folder("ras-", say) as work:
        return _autoscale(corpus, settings, options, plan, queries, work, progress, say)


def _autoscale(
    corpus: BenchCorpus,
    settings: RampartSettings,
    options: BenchOptions,
    plan: AutoscalePlan,
    queries: list[str],
    work: Path,
    progress: Progress | None,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """:func:`run_autoscale_bench` in its folder ``work``."""
    from services.common.net import free_port

    (work / "ray").mkdir()
    env = {
        **bench_env(work, settings.models_dir, free_port),
        "RAMPART_SERVE__PIPELINE_MIN_REPLICAS": str(plan.low),
        "RAMPART_SERVE__PIPELINE_MAX_REPLICAS": str(plan.high),
        "RAMPART_SERVE__UPSCALE_DELAY_S": str(plan.upscale_delay_s),
        "RAMPART_SERVE__DOWNSCALE_DELAY_S": str(plan.downscale_delay_s),
    }
    record: dict[str, Any] = {
        "corpus": corpus.name,
        "docs": len(corpus.documents),
        "plan": dataclasses.asdict(plan),
        "target_ongoing_requests": settings.serve.target_ongoing_requests,
        "users": options.locust_users,
        "seconds": options.locust_seconds,
        "cpus": os.cpu_count(),
    }
    say(f"starting the stack, pipeline autoscaled {plan.low}-{plan.high} …")
    with _running_stack(env, bench_principal(corpus.documents), work, record) as stack:
        with _client(stack.url, stack.key) as client:
            record["ingest_s"] = _ingest(client, corpus.documents, "stack", progress)
            for q in queries[: options.warmup]:
                _post(client, "/v1/search", {"query": q, "top_k": options.top_k}, "stack")
        with ReplicaSampler(plan.sample_every_s) as sampler:
            say(f"quiet for {plan.idle_s:.0f} s …")
            time.sleep(plan.idle_s)
            load_start = sampler.now()
            say(f"locust: {options.locust_users} users for {options.locust_seconds} s …")
            record["locust"] = run_locust(stack.url, stack.key, queries, options, work / "locust")
            load_end = sampler.now()
            say(f"quiet for {plan.cool_s:.0f} s …")
            time.sleep(plan.cool_s)
        record["samples"] = sampler.samples
        record["load"] = {"start_s": load_start, "end_s": load_end}
        record["summary"] = autoscale_summary(sampler.samples, load_start, load_end, plan.low, plan.high)
    return record
