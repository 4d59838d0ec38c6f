"""``rampart bench scale``: /v1/search throughput and p95 of the stack on OpenSearch with 1, 2, …
pipeline replicas (docs/opensearch.md, "Scale-out").

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
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
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
    work = Path(tempfile.mkdtemp(prefix="rsc-", dir="/tmp"))  # short: unix socket paths
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
    finished = False
    try:
        with opensearch_node(settings, work, say) as (url, jvm):
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
        finished = True
    finally:
        if finished:
            shutil.rmtree(work, ignore_errors=True)
        else:
            say(f"kept {work} for its logs (p<N>-<i>/stack/logs/<program>.log); remove it when done")
    record["runs"] = runs
    return record
