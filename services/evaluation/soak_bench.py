"""``rampart bench soak``: the stack under steady load for half an hour, memory of every program
sampled (issue 36, point 7: "flat within 10%").

A leak shows only with time: a cache that never evicts, a per-request list that is never cleared, a
gRPC channel opened per call. The stack of ``rampart bench faults`` (supervisord on free ports, a
temporary data directory, the same deadlines) gets a small corpus, then runs for ``minutes``:

- locust users alternating ``/v1/search`` and ``/v1/answer`` (each request one line in a record);
- an ingest loop that **replaces** a fixed pool of documents (same ids, new text each round), so the
  write path runs throughout but the index holds a constant number of documents: growth of the
  index would be data, not a leak, and would hide one.

Data kept on purpose for a while (each search's impression, 14 days by default) is set to expire
within the warm-up (:data:`RETENTION`): growth then means a leak, not retention.

Every ``sample_s`` each supervisord program's memory is read: the proportional set size (PSS) summed
over the program's process tree (Ray's GCS, raylet and workers under the orchestrator, Celery's
prefork children under the worker; PSS splits shared pages among their sharers, so a tree's sum is
not inflated by copy-on-write). After ``warmup_s`` (models loaded, caches filled) the first and the
last fifth of the samples are compared by their medians: growth = last / first - 1, ``flat`` when
it is at most ``bound`` (0.10). A program restarted during the run (a new pid) is reported, since
its memory started over. Latency and errors per fifth show whether the service itself drifted.

Ray binds every interface: run it in a loopback-only network namespace
(``python -m tests.e2e.isolated rampart bench soak``; ``make soak``).
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from services.common.settings import RampartSettings
from services.evaluation.fault_bench import (
    ACKNOWLEDGED,
    DEADLINES,
    FaultOptions,
    GatewayLoop,
    private_stack,
    read_records,
    start_locust,
    stop_locust,
    summarize_window,
    wait_for_requests,
)
from services.evaluation.stack_bench import (
    BenchCorpus,
    Target,
    _client,
    _ingest,
    take_queries,
)

MIB = 1024 * 1024
RETENTION = {"RAMPART_FEEDBACK__IMPRESSION_TTL_S": "60", "RAMPART_SESSIONS__TTL_S": "60"}
"""Data the stack keeps on purpose for a while, shortened so that it reaches its steady state within
the warm-up: each search's impression stays in Redis for 2 × ``feedback.impression_ttl_s`` (14 days
by default), and each request without a ``session_id`` opens a conversation session kept
``sessions.ttl_s`` (30 minutes, the length of the soak), so at the defaults Redis grows with every
request: retention by design, which would hide a leak (and read as one). Impressions: the setting's
floor, 60 s (kept 120 s); sessions: 60 s."""
PARTS = 5
"""The run after warm-up is cut into this many parts: the first and the last are compared."""


@dataclass(frozen=True)
class SoakOptions:
    minutes: float = 30.0
    warmup_s: float = 180.0
    """Models loaded, caches filled, and the impressions of the first requests expiring (:data:`RETENTION`)."""
    sample_s: float = 15.0
    bound: float = 0.10
    """Largest growth (last part's median over the first's, minus 1) still called flat."""
    users: int = 2
    top_k: int = 5
    ingest_interval_s: float = 1.0
    ingest_pool: int = 20
    """Documents the ingest loop replaces in turn (same ids, new text): the index stays this size."""


# ---- accounting (pure: the unit tests feed it synthetic samples) -----------------------------------
def memory_growth(
    samples: Sequence[tuple[float, float]], start: float, end: float, *, warmup_s: float, bound: float
) -> dict[str, Any]:
    """One program's figures from its ``(time, bytes)`` samples of a run ``[start, end)``: the medians
    (MiB) of the first and last of :data:`PARTS` parts after ``warmup_s``, their growth, whether it is
    within ``bound``, the peak, and the least-squares slope in MiB per hour over the same samples.
    Fewer than one sample in either part: ``flat`` is None (too short a run to say)."""
    steady = [(t, b) for t, b in samples if start + warmup_s <= t < end]
    part = (end - start - warmup_s) / PARTS
    first = [b for t, b in steady if t < start + warmup_s + part]
    last = [b for t, b in steady if t >= end - part]
    out: dict[str, Any] = {
        "samples": len(steady),
        "first_mib": None,
        "last_mib": None,
        "growth": None,
        "flat": None,
        "peak_mib": round(max(b for _, b in steady) / MIB, 1) if steady else None,
        "slope_mib_per_h": _slope_per_hour(steady),
    }
    if first and last:
        a, z = statistics.median(first), statistics.median(last)
        growth = z / a - 1 if a > 0 else 0.0
        out.update(
            first_mib=round(a / MIB, 1),
            last_mib=round(z / MIB, 1),
            growth=round(growth, 4),
            flat=growth <= bound,
        )
    return out


def _slope_per_hour(samples: Sequence[tuple[float, float]]) -> float | None:
    if len(samples) < 2:
        return None
    ts = [t for t, _ in samples]
    if max(ts) == min(ts):
        return None
    slope = statistics.linear_regression(ts, [b for _, b in samples]).slope
    return round(slope * 3600 / MIB, 1)


def latency_parts(records: Iterable[Mapping[str, Any]], start: float, end: float) -> list[dict[str, Any]]:
    """The request record cut into :data:`PARTS` equal parts of ``[start, end)``: each part's
    requests, statuses, degraded share and p50/p95 (``summarize_window``'s figures)."""
    rows = list(records)
    step = (end - start) / PARTS
    return [
        summarize_window(f"part {i + 1}", rows, start + i * step, start + (i + 1) * step)
        for i in range(PARTS)
    ]


# ---- sampling -------------------------------------------------------------------------------------
def tree_pss(pid: int) -> int:
    """Bytes of PSS over ``pid`` and every descendant (RSS where PSS is unreadable); 0 if it is gone.
    Processes that exit between the listing and the read are skipped."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
            total += int(getattr(info, "pss", 0) or info.rss)
        except psutil.AccessDenied:
            try:
                total += int(proc.memory_info().rss)
            except psutil.Error:
                continue
        except psutil.Error:
            continue
    return total


@dataclass
class MemorySampler:
    """Every ``interval_s``, each program's tree PSS and pid, from a thread, until stopped."""

    programs: Callable[[], Sequence[tuple[str, int]]]
    interval_s: float
    samples: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    pids: dict[str, set[int]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        now = time.time()
        for name, pid in self.programs():
            if pid <= 0:
                continue
            self.pids.setdefault(name, set()).add(pid)
            self.samples.setdefault(name, []).append((now, float(tree_pss(pid))))

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="soak-memory", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)


# ---- the ingest loop: replace a fixed pool ----------------------------------------------------------
@dataclass
class ReplaceLoop(GatewayLoop):
    """Documents ``soak-<run>-<i % pool>`` sent with new text each round through the gateway, from a
    thread: the write path under load with an index of constant size. Counts what was acknowledged
    and what was refused (non-200, a failed or rejected outcome, no answer)."""

    pool: int = 20
    acknowledged: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    sent: int = 0

    def document(self, n: int) -> dict[str, Any]:
        slot, revision = n % self.pool, n // self.pool
        return {
            "id": f"soak-{self.run}-{slot}",
            "version": revision + 1,  # a replacement must name a newer version (docs/api.md)
            "title": f"Soak note {slot}",
            "acl": {"groups": ["*"]},
            "text": f"Soak note {slot}, revision {revision}: rota code zq{self.run}r{n}.",
        }

    def tick(self, client: httpx.Client, n: int) -> None:
        self.sent += 1
        try:
            r = client.post("/v1/documents", json={"documents": [self.document(n)]})
        except httpx.HTTPError as exc:
            self.refused[type(exc).__name__] += 1
            return
        if r.status_code != 200:
            self.refused[f"http {r.status_code}"] += 1
            return
        result = r.json()["results"][0]
        if result["outcome"] in ACKNOWLEDGED:
            self.acknowledged += 1
        else:  # by outcome and code: "rejected conflict" says what to fix
            self.refused[f"{result['outcome']} {result.get('code') or ''}".strip()] += 1


# ---- the run ---------------------------------------------------------------------------------------
def run_soak_bench(
    corpus: BenchCorpus,
    settings: RampartSettings,
    options: SoakOptions,
    *,
    started: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Start the stack (:func:`~services.evaluation.fault_bench.private_stack`, as the fault bench
    does), ingest ``corpus``, hold the load for ``options.minutes`` while sampling memory; per program
    the memory figures, per fifth of the run the latency figures."""
    say = started or (lambda _msg: None)
    with private_stack(corpus, settings, say, prefix="rsk-", extra_env=RETENTION) as (
        target,
        sup,
        _,
        work,
        record,
    ):
        record.update(_soak(target, sup, corpus, options, work, say))
    record.update(
        minutes=options.minutes,
        warmup_s=options.warmup_s,
        sample_s=options.sample_s,
        bound=options.bound,
        users=options.users,
        endpoints=["search", "answer"],
        ingest_every_s=options.ingest_interval_s,
        ingest_pool=options.ingest_pool,
        deadlines_ms={k.removeprefix("RAMPART_"): int(v) for k, v in DEADLINES.items()},
        retention={k.removeprefix("RAMPART_"): int(v) for k, v in RETENTION.items()},
    )
    return record


def _soak(
    target: Target,
    sup: Any,
    corpus: BenchCorpus,
    options: SoakOptions,
    work: Path,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Ingest the corpus, start the load and the sampler, wait ``minutes``, stop, summarise."""
    with _client(target.url, target.key) as client:
        record: dict[str, Any] = {"corpus_ingest_s": _ingest(client, corpus.documents, "stack", None)}
    loop = ReplaceLoop(target, uuid.uuid4().hex[:6], options.ingest_interval_s, pool=options.ingest_pool)
    load = FaultOptions(users=options.users, spawn_rate=float(options.users), top_k=options.top_k)
    locust = start_locust(target, take_queries(corpus.queries, 50), load, work / "locust")
    sampler = MemorySampler(lambda: [(s.name, s.pid) for s in sup.states()], options.sample_s)
    try:
        wait_for_requests(work / "locust" / "requests.jsonl")
        loop.start()
        start = time.time()
        sampler.start()
        say(
            f"load: {options.users} locust users (search + answer) and the replace loop, {options.minutes:g} min"
        )
        _wait(start + options.minutes * 60, say)
        end = time.time()
    finally:
        sampler.stop()
        loop.stop()
        stop_locust(locust)
    records = read_records(work / "locust" / "requests.jsonl")
    memory = {
        name: {
            **memory_growth(samples, start, end, warmup_s=options.warmup_s, bound=options.bound),
            "restarted": len(sampler.pids.get(name, ())) > 1,
        }
        for name, samples in sorted(sampler.samples.items())
    }
    record.update(
        memory=memory,
        flat=all(m["flat"] is True and not m["restarted"] for m in memory.values()),
        parts=latency_parts(records, start, end),
        documents={"sent": loop.sent, "acknowledged": loop.acknowledged, "refused": dict(loop.refused)},
    )
    return record


def _wait(until: float, say: Callable[[str], None], every_s: float = 300.0) -> None:
    """Sleep until ``until``, saying how long is left every ``every_s``."""
    while (left := until - time.time()) > 0:
        time.sleep(min(left, every_s))
        if until - time.time() > 1:
            say(f"{(until - time.time()) / 60:.1f} min left")
