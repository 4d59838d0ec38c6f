"""``rampart bench faults``: SIGKILL each program of the stack in turn under load (issue 36, point 7).

The stack of ``rampart bench stack`` (supervisord on free ports, a temporary data directory) gets a
small corpus, then three things run at once: locust users alternating ``/v1/search`` and
``/v1/answer`` (each request one JSON line in a record file), an ingest loop sending new documents
with unique ids (remembering each one the API acknowledged: HTTP 200 and outcome ``indexed`` or
``unchanged`` — the gateway answers only once the ingest service has indexed and journalled the
document), and this process killing one program at a time with SIGKILL (supervisord restarts it).

Each window, from a kill until the program is back and a search is undegraded again (at least
``window_s``), is summarised from the record: requests, statuses, the share of 200s flagged
``degraded`` and which stages, p50/p95, and the recovery times. At the end the load stops and every
acknowledged document must be indexed and searchable, or reported failed by the status API; anything
else is lost, and the bench exits non-zero. Ray binds every interface: run it in a loopback-only
network namespace (``python -m tests.e2e.isolated rampart bench faults``).
"""

from __future__ import annotations

import abc
import contextlib
import itertools
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from services.common.errors import ErrorCode, RampartError
from services.common.settings import RampartSettings
from services.evaluation.metrics import latency_ms_p50, latency_ms_p95
from services.evaluation.stack_bench import (
    BenchCorpus,
    Target,
    _client,
    _ingest,
    _running_stack,
    bench_env,
    bench_principal,
    locust_command,
    take_queries,
)

BASELINE = "none"
"""The window name of the load before any kill: what undisturbed figures look like on this machine."""
ACKNOWLEDGED = ("indexed", "unchanged")
"""Ingest outcomes that promise the document is stored (docs/api.md, ``POST /v1/documents``)."""
PROBE_TOP_K = 3
DEADLINES = {"RAMPART_RERANK__TRITON__DEADLINE_MS": "15000", "RAMPART_FACTCHECK__DEADLINE_MS": "15000"}
"""Triton rerank and fact-check deadlines for the run (defaults 2 and 3 s): on a busy 2-core machine the load
alone pushes calls past the defaults and every response comes back degraded, which would hide what a
kill does. A dead program is still flagged (a refused connection at once, a lost Celery worker at
the deadline)."""


@dataclass(frozen=True)
class FaultOptions:
    window_s: float = 20.0
    recover_timeout_s: float = 180.0
    settle_timeout_s: float = 60.0
    users: int = 2
    spawn_rate: float = 2.0
    top_k: int = 5
    ingest_interval_s: float = 0.5
    ingest_batch: int = 2
    programs: tuple[str, ...] | None = None
    """Programs to kill, in order; None: every program of the plan."""
    stage_deadlines: bool = True
    """True: :data:`DEADLINES` for the run; False: the settings' own (Triton 2 s, fact-check 3 s), what a
    deployment runs with, on a machine quiet enough for them."""


# ---- accounting (pure: the unit tests feed it synthetic records) -----------------------------------
def summarize_window(
    program: str, records: Iterable[Mapping[str, Any]], start: float, end: float
) -> dict[str, Any]:
    """One window's figures from the locust record lines whose request started in ``[start, end)``:
    requests, HTTP status counts (0: no connection), 5xx, the share of 200s flagged degraded and the
    stages they name (with counts), the five commonest error bodies, p50/p95 ms over every request."""
    inside = [r for r in records if start <= float(r["t"]) < end]
    statuses = Counter(int(r["status"]) for r in inside)
    ok = [r for r in inside if int(r["status"]) == 200]
    flagged = [r for r in ok if r.get("degraded")]
    stages = Counter(s for r in flagged for s in r["degraded"])
    ms = [float(r["ms"]) for r in inside]
    return {
        "program": program,
        "seconds": round(end - start, 1),
        "requests": len(inside),
        "statuses": {str(k): v for k, v in sorted(statuses.items())},
        "errors_5xx": sum(v for k, v in statuses.items() if k >= 500),
        "no_connection": statuses.get(0, 0),
        "ok": len(ok),
        "degraded_share": round(len(flagged) / len(ok), 3) if ok else 0.0,
        "degraded_stages": dict(sorted(stages.items())),
        "errors": dict(Counter(str(r["error"]) for r in inside if r.get("error")).most_common(5)),
        "p50_ms": round(latency_ms_p50(ms), 1) if ms else None,
        "p95_ms": round(latency_ms_p95(ms), 1) if ms else None,
    }


def totals(windows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The windows added up (the baseline included): requests, 5xx, no-connection, 200s and the
    degraded share over all 200s."""
    ok = sum(int(w["ok"]) for w in windows)
    flagged = sum(round(float(w["degraded_share"]) * int(w["ok"])) for w in windows)
    return {
        "requests": sum(int(w["requests"]) for w in windows),
        "errors_5xx": sum(int(w["errors_5xx"]) for w in windows),
        "no_connection": sum(int(w["no_connection"]) for w in windows),
        "ok": ok,
        "degraded_share": round(flagged / ok, 3) if ok else 0.0,
    }


def reconcile(
    acknowledged: Iterable[str], states: Mapping[str, str | None], found: Iterable[str]
) -> dict[str, Any]:
    """Every acknowledged id classified: ``indexed`` (status indexed and a search finds it),
    ``failed`` (the status API reports it failed: the loss is flagged, not silent), else ``lost``
    (unknown to the status API, stuck pending, or indexed but not searchable)."""
    seen = set(found)
    ids = sorted(set(acknowledged))
    indexed = [i for i in ids if states.get(i) == "indexed" and i in seen]
    failed = [i for i in ids if states.get(i) == "failed"]
    lost = [i for i in ids if i not in set(indexed) | set(failed)]
    return {
        "acknowledged": len(ids),
        "indexed": len(indexed),
        "failed": len(failed),
        "lost": len(lost),
        "lost_ids": lost[:20],
        "lost_states": {i: states.get(i) for i in lost[:20]},
    }


def read_records(path: Path) -> list[dict[str, Any]]:
    """The locust record's lines; a torn last line (a killed locust) is skipped."""
    records: list[dict[str, Any]] = []
    if not path.exists():
        return records
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records


# ---- the ingest loop -------------------------------------------------------------------------------
@dataclass
class GatewayLoop(abc.ABC):
    """Calls the gateway from a thread every ``interval_s`` (:meth:`tick`, one client for the run) until
    stopped; the fault bench's and the soak bench's ingest loops."""

    target: Target
    run: str
    interval_s: float
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _thread: threading.Thread | None = field(default=None, init=False)

    @abc.abstractmethod
    def tick(self, client: httpx.Client, n: int) -> None:
        """One call of the loop (the ``n``-th), on the loop's client."""

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name=type(self).__name__, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=120)

    def _loop(self) -> None:
        numbers = itertools.count()
        with _client(self.target.url, self.target.key) as client:
            client.timeout = httpx.Timeout(60.0)
            while not self._stop.is_set():
                self.tick(client, next(numbers))
                self._stop.wait(self.interval_s)


@dataclass
class IngestLoop(GatewayLoop):
    """New documents with unique ids through the gateway until stopped, from a thread; keeps what the
    API acknowledged and counts what it refused (non-200, a failed or rejected outcome, no answer)."""

    batch: int = 2
    acknowledged: list[str] = field(default_factory=list)
    refused: Counter[str] = field(default_factory=Counter)
    sent: int = 0

    def document(self, n: int) -> dict[str, Any]:
        return {
            "id": f"fault-{self.run}-{n}",
            "title": f"Fault bench note {n}",
            "acl": {"groups": ["*"]},
            "text": f"Fault bench note {n} of run {self.run}: checkpoint code zq{self.run}x{n}.",
        }

    def tick(self, client: httpx.Client, n: int) -> None:
        docs = [self.document(n * self.batch + i) for i in range(self.batch)]
        self.sent += len(docs)
        self._send(client, docs)

    def _send(self, client: httpx.Client, docs: list[dict[str, Any]]) -> None:
        try:
            r = client.post("/v1/documents", json={"documents": docs})
        except httpx.HTTPError as exc:
            self.refused[type(exc).__name__] += len(docs)
            return
        if r.status_code != 200:
            self.refused[f"http {r.status_code}"] += len(docs)
            return
        for result in r.json()["results"]:
            if result["outcome"] in ACKNOWLEDGED:
                self.acknowledged.append(str(result["id"]))
            else:
                self.refused[str(result["outcome"])] += 1


# ---- load: locust in the background ----------------------------------------------------------------
def start_locust(
    target: Target, queries: Sequence[str], options: FaultOptions, out_dir: Path
) -> subprocess.Popen[bytes]:
    """Locust alternating search and answer for far longer than the run; :func:`stop_locust` ends it
    (the figures come from the record file, not from locust's totals)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = locust_command(
        target.url, out_dir / "run", seconds=24 * 3600, users=options.users, spawn_rate=options.spawn_rate
    )
    env = {
        **os.environ,
        "RAMPART_BENCH_API_KEY": target.key,
        "RAMPART_BENCH_QUERIES": json.dumps(list(queries)),
        "RAMPART_BENCH_TOP_K": str(options.top_k),
        "RAMPART_BENCH_ENDPOINTS": "search,answer",
        "RAMPART_BENCH_RECORD": str(out_dir / "requests.jsonl"),
    }
    with (out_dir / "locust.log").open("ab") as log:
        return subprocess.Popen(  # noqa: S603 - our venv's locust, argument list
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop_locust(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (locust stops its users and exits), SIGKILL after a minute."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def wait_for_requests(path: Path, timeout_s: float = 60.0) -> None:
    """Until locust's first request is in the record: windows before that would count nothing."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size > 0:
            return
        time.sleep(0.5)
    raise RampartError(ErrorCode.UNAVAILABLE, f"locust sent no request within {timeout_s:g} s; see {path}")


# ---- faults ----------------------------------------------------------------------------------------
def probe_undegraded(client: httpx.Client) -> bool:
    """One search never asked before: answered 200 with no stage skipped."""
    query = f"fault bench probe {uuid.uuid4().hex[:8]}: who approves an expense claim?"
    try:
        r = client.post("/v1/search", json={"query": query, "top_k": PROBE_TOP_K}, timeout=30.0)
    except httpx.HTTPError:
        return False
    return r.status_code == 200 and not r.json().get("degraded")


def wait_recovered(
    sup: Any, name: str, old_pid: int, probe: Callable[[], bool], timeout_s: float
) -> dict[str, float | None]:
    """Seconds from the kill until supervisord runs ``name`` again (a new pid) and until a probe search
    is undegraded after that; None for what did not happen within ``timeout_s``."""
    from services.stack.control import RUNNING

    t0 = time.monotonic()
    back: float | None = None
    clean: float | None = None
    while time.monotonic() - t0 < timeout_s:
        if back is None:
            state = next((s for s in sup.states() if s.name == name), None)
            if state is not None and state.state == RUNNING and state.pid not in (0, old_pid):
                back = round(time.monotonic() - t0, 1)
        if back is not None and probe():
            clean = round(time.monotonic() - t0, 1)
            break
        time.sleep(0.5)
    return {"back_s": back, "undegraded_s": clean}


def kill_in_turn(
    sup: Any, names: Sequence[str], client: httpx.Client, options: FaultOptions, say: Callable[[str], None]
) -> list[dict[str, Any]]:
    """A baseline window, then per program: SIGKILL, wait for recovery, keep the load until at least
    ``window_s`` has passed. Each window: ``{program, start, end, pid, back_s, undegraded_s}``."""
    start = time.time()
    time.sleep(options.window_s)
    windows: list[dict[str, Any]] = [{"program": BASELINE, "start": start, "end": time.time()}]
    for name in names:
        say(f"kill -9 {name} …")
        start = time.time()
        pid = sup.kill_program(name)
        recovery = wait_recovered(sup, name, pid, lambda: probe_undegraded(client), options.recover_timeout_s)
        time.sleep(max(0.0, start + options.window_s - time.time()))
        windows.append({"program": name, "start": start, "end": time.time(), "pid": pid, **recovery})
        say(f"{name}: back after {recovery['back_s']} s, undegraded after {recovery['undegraded_s']} s")
    return windows


# ---- reconciliation over the API -------------------------------------------------------------------
def document_states(client: httpx.Client, ids: Sequence[str], timeout_s: float) -> dict[str, str | None]:
    """Each id's state from ``GET /v1/documents/{id}/status`` (None: 404), asked again while it is
    ``pending`` or the gateway does not answer, until ``timeout_s``: ingest settling after the load."""
    states: dict[str, str | None] = {}
    todo = list(ids)
    deadline = time.monotonic() + timeout_s
    while todo:
        again: list[str] = []
        for doc_id in todo:
            try:
                r = client.get(f"/v1/documents/{doc_id}/status", timeout=30.0)
            except httpx.HTTPError:
                again.append(doc_id)
                continue
            if r.status_code == 404:
                states[doc_id] = None
            elif r.status_code == 200:
                states[doc_id] = str(r.json()["state"])
                if states[doc_id] == "pending":
                    again.append(doc_id)
            else:
                again.append(doc_id)
        if not again or time.monotonic() > deadline:
            break
        todo = again
        time.sleep(1.0)
    return states


def searchable(client: httpx.Client, ids: Sequence[str], text_of: Callable[[str], str]) -> set[str]:
    """The ids a search restricted to them finds: fifty at a time on the words every fault document
    shares, then each one missed on its own unique text."""
    found: set[str] = set()
    for i in range(0, len(ids), 50):
        batch = list(ids[i : i + 50])
        found |= _search_ids(client, "fault bench note checkpoint code", batch, top_k=100)
    for doc_id in [i for i in ids if i not in found]:
        found |= _search_ids(client, text_of(doc_id), [doc_id], top_k=3)
    return found


def _search_ids(client: httpx.Client, query: str, doc_ids: list[str], *, top_k: int) -> set[str]:
    """The ids of ``doc_ids`` the index returns for ``query``; rerank and fact-check off (this asks
    whether the document is in the index, not whether it passes the defence: the fault documents are
    near-copies of one another, which the fact-check is right to withhold)."""
    body = {
        "query": query,
        "top_k": top_k,
        "filters": {"doc_ids": doc_ids},
        "rerank": {"enabled": False},
        "factcheck": {"enabled": False},
    }
    r = client.post("/v1/search", json=body, timeout=120.0)
    if r.status_code != 200:
        raise RampartError(
            ErrorCode.UNAVAILABLE, f"the check search answered HTTP {r.status_code}: {r.text[:300]}"
        )
    found = r.json()
    return {str(h["doc_id"]) for h in found["results"]} | {str(h["doc_id"]) for h in found["filtered"]}


# ---- the run ---------------------------------------------------------------------------------------
def stack_programs(settings: RampartSettings) -> list[str]:
    """The names supervisord runs the stack's programs under, dependencies first (the plan's order)."""
    from services.stack.plan import programs

    return [p.name for p in programs(settings)]


@contextlib.contextmanager
def private_stack(
    corpus: BenchCorpus,
    settings: RampartSettings,
    say: Callable[[str], None],
    *,
    prefix: str,
    extra_env: Mapping[str, str] | None = None,
    deadlines: Mapping[str, str] = DEADLINES,
) -> Iterator[tuple[Target, Any, RampartSettings, Path, dict[str, Any]]]:
    """The stack of ``rampart bench stack`` for a bench that disturbs it: settings from the environment
    plus :func:`~stack_bench.bench_env`, ``deadlines`` (:data:`DEADLINES`) and ``extra_env`` (of ``settings`` only
    ``models_dir`` is used), in a ``/tmp/<prefix>*`` folder kept for its logs when the bench fails.
    Yields the gateway, the supervisor, the stack's settings, the folder and the record so far
    (start-up time)."""
    from services.common.net import free_port
    from services.evaluation.stack_bench import bench_folder, environ
    from services.stack.control import Supervisor

    record: dict[str, Any] = {"corpus": corpus.name, "docs": len(corpus.documents)}
    with bench_folder(prefix, say, logs="stack/logs/<program>.log, locust/") as work:
        (work / "ray").mkdir()
        env = {**bench_env(work, settings.models_dir, free_port), **deadlines, **(extra_env or {})}
        with environ(env):
            stack_settings = RampartSettings()
        say("starting the stack …")
        with _running_stack(env, bench_principal(corpus.documents), work, record) as target:
            yield target, Supervisor(stack_settings.stack_dir().resolve()), stack_settings, work, record


def run_fault_bench(
    corpus: BenchCorpus,
    settings: RampartSettings,
    options: FaultOptions,
    *,
    started: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Start the stack (:func:`private_stack`), ingest ``corpus``, put it under load and kill each
    program in turn; the windows, totals and the acknowledged-document reconciliation."""
    say = started or (lambda _msg: None)
    deadlines = DEADLINES if options.stage_deadlines else {}
    with private_stack(corpus, settings, say, prefix="rfb-", deadlines=deadlines) as (
        target,
        sup,
        stack_settings,
        work,
        record,
    ):
        names = list(options.programs or stack_programs(stack_settings))
        unknown = sorted(set(names) - {s.name for s in sup.states()})
        if unknown:
            raise RampartError(
                ErrorCode.INVALID_ARGUMENT,
                f"not programs of this stack: {', '.join(unknown)} (it runs "
                f"{', '.join(s.name for s in sup.states())})",
            )
        record.update(_under_load(target, sup, names, corpus, options, work, say))
    record.update(
        window_s=options.window_s,
        users=options.users,
        endpoints=["search", "answer"],
        ingest_every_s=options.ingest_interval_s,
        ingest_batch=options.ingest_batch,
        deadlines_ms={
            k.removeprefix("RAMPART_"): int(deadlines[k]) if k in deadlines else "default" for k in DEADLINES
        },
    )
    return record


def _under_load(
    target: Target,
    sup: Any,
    names: Sequence[str],
    corpus: BenchCorpus,
    options: FaultOptions,
    work: Path,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Ingest the corpus, start locust and the ingest loop, kill in turn, stop the load, reconcile."""
    with _client(target.url, target.key) as client:
        record: dict[str, Any] = {"corpus_ingest_s": _ingest(client, corpus.documents, "stack", None)}
        loop = IngestLoop(target, uuid.uuid4().hex[:6], options.ingest_interval_s, batch=options.ingest_batch)
        locust = start_locust(target, take_queries(corpus.queries, 50), options, work / "locust")
        try:
            wait_for_requests(work / "locust" / "requests.jsonl")
            loop.start()
            say(f"load: {options.users} locust users (search + answer) and the ingest loop")
            windows = kill_in_turn(sup, names, client, options, say)
        finally:
            loop.stop()
            stop_locust(locust)
        records = read_records(work / "locust" / "requests.jsonl")
        summaries = [
            {**summarize_window(w["program"], records, w["start"], w["end"]), **_recovery(w)} for w in windows
        ]
        say(f"load stopped; checking the {len(loop.acknowledged)} acknowledged documents …")
        states = document_states(client, loop.acknowledged, options.settle_timeout_s)
        found = searchable(
            client, [i for i in loop.acknowledged if states.get(i) == "indexed"], lambda i: _text(loop, i)
        )
    record.update(
        windows=summaries,
        totals=totals(summaries),
        documents={
            **reconcile(loop.acknowledged, states, found),
            "sent": loop.sent,
            "refused": dict(loop.refused),
        },
    )
    return record


def _recovery(window: Mapping[str, Any]) -> dict[str, Any]:
    return {k: window.get(k) for k in ("back_s", "undegraded_s")}


def _text(loop: IngestLoop, doc_id: str) -> str:
    return str(loop.document(int(doc_id.rsplit("-", 1)[1]))["text"])
