"""Distributed fact-checker: per-document evidence on Celery workers over Redis, verdicts on the caller.

A check looks every passage up in the Redis evidence cache first, sends the remaining distinct
passages as a group of batch tasks (``factcheck.celery.items_per_task`` passages each: one embedding
call per task, not per passage), collects them within the deadline and runs the same classifier as
the in-process checker, so both give identical verdicts for the same inputs (the contract suite
checks it). The corpus profile (``check(linked=...)``) stays here too: the rules that read titles
decide on the caller, and the workers' per-passage evidence does not depend on them, so a task carries
no profile and workers of any version serve both profiles from one evidence cache.

Failure is a verdict too: when Redis is down, no worker is up, a task fails or the deadline passes,
``check`` returns ``unverified`` with the reason and search goes on. Two things make that prompt:

* every Redis client here fails fast (bounded socket timeouts, no hidden retry loops), and
* the Celery exchange runs on a small pool of daemon threads while the caller waits at most the
  deadline. Some library paths (kombu retries a broadcast forever while the broker is down) cannot
  be bounded from outside; a stuck daemon thread costs a pool slot, never the caller or process exit.

Reasons travel to API clients, so they name no hosts and no URLs; the log has the (redacted) URL.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from celery import Celery, group
from celery.exceptions import TimeoutError as CeleryTimeoutError
from celery.result import AsyncResult
from kombu.exceptions import OperationalError
from pydantic import ValidationError

from services.common.config import LlmSettings
from services.common.errors import ErrorCode, RampartError
from services.common.redis_server import redact_url
from services.factcheck.celery_app import (
    BATCH_TASK_NAME,
    TRANSIENT_ERRORS,
    WorkerState,
    as_sent,
    cache_url,
    configure_app,
    evidence_key,
    evidence_model_id,
    redis_client,
)
from services.factcheck.checker import CheckOutcome
from services.factcheck.classifier import decide_head
from services.factcheck.config import FactCheckSettings
from services.factcheck.evidence import CheckInput, Evidence
from services.factcheck.inputs import check_items
from services.factcheck.model_conflicts import ModelConflicts
from services.retrieval.embedder import Embedder

log = logging.getLogger(__name__)

T = TypeVar("T")
# Result polling interval: GroupResult.get's default (0.5 s) would add up to half a second per check.
POLL_INTERVAL_S = 0.005
# How much longer than its deadline the caller waits for the exchange's own, more precise reason
# ("no worker answered"). 0.05 s lost that race on a busy 2-core CI machine (a clean-clone run said only
# "did not finish"); the wait ends as soon as the exchange gives up, so a larger grace costs nothing.
GRACE_S = 0.25
# Publishing a task: one quick retry covers a Redis restart; a longer outage is the deadline's job.
PUBLISH_RETRY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.1, "interval_max": 0.1}
# Redis and kombu failures that mean "backend unavailable", not "bug".
BACKEND_ERRORS: tuple[type[Exception], ...] = (*TRANSIENT_ERRORS, OperationalError, OSError)
# While collecting results, Celery turns a result connection it could not re-establish into RuntimeError.
COLLECT_ERRORS: tuple[type[Exception], ...] = (*BACKEND_ERRORS, RuntimeError)


def batches(items: Sequence[T], per_task: int) -> list[list[T]]:
    """``items`` in ``ceil(len / per_task)`` consecutive batches of near-equal size (31 passages at
    30 per task: 16 + 15, not 30 + 1, so two worker processes finish together)."""
    n = len(items)
    count = -(-n // max(1, per_task))
    return [list(items[k * n // count : (k + 1) * n // count]) for k in range(count)]


class UnverifiedError(Exception):
    """The check cannot be had now; ``str(exc)`` is the reason the caller reads."""


class _QuietResult(AsyncResult):  # type: ignore[misc]  # celery ships no type hints
    """``AsyncResult`` without network I/O in its destructor.

    Celery's ``__del__`` unsubscribes from the result over the Redis pub/sub connection of the thread
    that sent the task, from whatever thread the garbage collector happens to run in: a race on that
    connection, and "Exception ignored in __del__" noise whenever Redis is down. The checker
    unsubscribes explicitly instead (:meth:`CeleryFactChecker._release`), on the owning thread.
    """

    def __del__(self) -> None:
        return None


@dataclass
class _Sent:
    """A group of tasks a check sent, and whether all their results came back."""

    result: Any
    collected: bool = False


class _DaemonPool:
    """A fixed set of daemon threads running submitted calls in order.

    Not ``ThreadPoolExecutor``: its threads are joined at interpreter exit, so one stuck in a library
    retry loop (see the module doc) would hang shutdown. The threads are long-lived on purpose:
    Celery keeps a result backend (a Redis pub/sub connection) per thread.
    """

    def __init__(self, size: int, name: str) -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True) for i in range(size)
        ]
        for t in self._threads:
            t.start()

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            except Exception:  # a job reports through its future; this is only a safety net
                log.exception("fact-check pool job failed")

    def submit(self, fn: Callable[[cf.Future[T]], None]) -> cf.Future[T]:
        """Run ``fn(future)``; ``fn`` settles the future itself and may keep working afterwards
        (cleanup after the answer), which a plain executor cannot express."""
        fut: cf.Future[T] = cf.Future()
        # the caller's context (its trace span) goes with the job: task headers carry it to workers
        ctx = contextvars.copy_context()
        self._jobs.put(lambda: ctx.run(fn, fut))
        return fut

    def shutdown(self, wait_s: float) -> None:
        """Stop the threads after their current job (a check's cleanup runs after its answer),
        waiting at most ``wait_s`` in all: a thread stuck in a library retry loop is left behind."""
        for _ in self._threads:
            self._jobs.put(None)
        end = time.monotonic() + wait_s
        for t in self._threads:
            t.join(timeout=max(0.0, end - time.monotonic()))


def _settle(fut: cf.Future[T], fn: Callable[[], T]) -> None:
    """Run ``fn`` into ``fut`` unless the caller already gave up on it."""
    if not fut.set_running_or_notify_cancel():
        return
    try:
        fut.set_result(fn())
    except BaseException as exc:
        fut.set_exception(exc)


class CeleryFactChecker:
    def __init__(
        self,
        app: Celery,
        settings: FactCheckSettings,
        model_id: str,
        conflicts: ModelConflicts | None = None,
    ) -> None:
        """``conflicts``: the contradiction classifier over pairs of passages; it runs here, on the
        caller, with the rest of the set-level rules (the workers compute per-document evidence)."""
        self.app = app
        self.settings = settings
        self.unlinked = settings.for_corpus(linked=False)  # what a check of a generic corpus decides with
        self._model_id = model_id
        self.conflicts = conflicts
        c = settings.celery
        self._queue = c.queue
        self._cache_url = cache_url(c)
        self._cache = redis_client(self._cache_url, c)
        self._broker = redis_client(c.broker_url, c) if c.broker_url.startswith(("redis", "unix")) else None
        # Client side only: connecting to the broker gives up after one retry instead of kombu's
        # default of retrying forever (workers keep their own reconnection policy).
        app.conf.broker_transport_options = {
            **app.conf.broker_transport_options,
            "max_retries": 1,
            "interval_start": 0,
            "interval_step": 0.1,
            "interval_max": 0.1,
            "connect_retries_timeout": c.socket_timeout_s,
        }
        app.AsyncResult = app.subclass_with_self(_QuietResult)
        self._pool = _DaemonPool(settings.workers, "factcheck-celery")
        log.info(
            "celery fact-checker: broker %s, queue %s, cache %s",
            redact_url(c.broker_url),
            self._queue,
            redact_url(self._cache_url),
        )

    @classmethod
    def from_settings(
        cls,
        settings: FactCheckSettings,
        llm: LlmSettings,
        embedder: Embedder,
        conflicts: ModelConflicts | None = None,
    ) -> CeleryFactChecker:
        """The caller's embedder (and LLM judge settings) name the model: workers must load the same
        one and ask the same judge (the task refuses to compute evidence under another model id).

        The caller's app has the tasks registered as the workers' has (it sends them, never runs
        them), so its worker state lends it the caller's own embedder."""
        return cls(
            configure_app(settings.celery, WorkerState(settings, llm, lambda: embedder)),
            settings,
            evidence_model_id(settings, llm, embedder.model_id),
            conflicts,
        )

    @property
    def model_id(self) -> str:
        return self._model_id

    # ---- check -----------------------------------------------------------------------------------
    def check(
        self,
        query: str,
        items: Sequence[CheckInput],
        *,
        deadline_s: float,
        context: Sequence[CheckInput] = (),
        linked: bool = True,
    ) -> CheckOutcome:
        # Context passages travel as ordinary evidence tasks (and share the cache): with an LLM judge
        # configured on the workers they are judged too, and only the judged items' verdicts count.
        everything = check_items(query, items, context)
        n = len(items)
        if not n:
            return CheckOutcome()
        deadline = time.monotonic() + max(0.0, deadline_s)
        fut: cf.Future[list[Evidence]] = self._pool.submit(
            lambda f: self._exchange(f, query, everything, deadline)
        )
        try:
            evidence = fut.result(timeout=max(0.0, deadline - time.monotonic()) + GRACE_S)
        except cf.TimeoutError:
            fut.cancel()  # still queued: it will not start; running: it stops at the same deadline
            return CheckOutcome(
                unverified=True, reason=f"fact-check did not finish within {deadline_s * 1000:.0f} ms"
            )
        except UnverifiedError as exc:
            return CheckOutcome(unverified=True, reason=str(exc))
        except Exception as exc:  # a bug or an unforeseen library error: degrade, with the trace logged
            log.error("celery fact-check failed", exc_info=exc)
            return CheckOutcome(unverified=True, reason=f"fact-check error ({type(exc).__name__})")
        settings = self.settings if linked else self.unlinked
        return CheckOutcome(decide_head(query, everything, evidence, n, settings, self.conflicts))

    def _exchange(
        self, fut: cf.Future[list[Evidence]], query: str, items: list[CheckInput], deadline: float
    ) -> None:
        """On a pool thread: cache lookup, tasks, collection. Settles ``fut`` as soon as the answer
        (or the reason there is none) is known, then cleans up what the check left behind."""
        sent: list[_Sent] = []
        _settle(fut, lambda: self._gather(query, items, deadline, sent))
        for group_sent in sent:
            self._release(group_sent)

    def _gather(
        self, query: str, items: list[CheckInput], deadline: float, sent: list[_Sent]
    ) -> list[Evidence]:
        capped = as_sent(items)  # stored vectors stay here (the evidence gets them back below)
        keys = [evidence_key(query, i, self._model_id) for i in capped]
        found = self._cached(keys) if self.settings.celery.cache_ttl_s else {}
        todo: dict[str, CheckInput] = {}
        for key, item in zip(keys, capped, strict=True):
            if key not in found:
                todo.setdefault(key, item)  # identical passages are computed once
        if todo:
            found.update(self._run_tasks(query, todo, deadline, sent))
        # Cached evidence may come from another chunk with the same content: the chunk id is ours.
        return [
            found[k].model_copy(update={"chunk_id": i.chunk_id, **({"vector": i.vector} if i.vector else {})})
            for k, i in zip(keys, items, strict=True)
        ]

    def _cached(self, keys: list[str]) -> dict[str, Evidence]:
        try:
            raw = self._cache.mget(keys)
        except TRANSIENT_ERRORS as exc:
            log.warning("evidence cache %s unreachable: %s", redact_url(self._cache_url), type(exc).__name__)
            raise UnverifiedError(f"fact-check cache (Redis) unreachable ({type(exc).__name__})") from exc
        out: dict[str, Evidence] = {}
        for key, value in zip(keys, raw, strict=True):
            if value is None:
                continue
            try:
                out[key] = Evidence.model_validate_json(value)
            except ValidationError:
                log.warning("ignoring unreadable cached evidence %s", key)
        return out

    def _run_tasks(
        self, query: str, todo: dict[str, CheckInput], deadline: float, sent: list[_Sent]
    ) -> dict[str, Evidence]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise UnverifiedError("fact-check deadline passed before the tasks could be sent")
        parts = batches(list(todo.items()), self.settings.celery.items_per_task)
        sigs = [
            self.app.signature(
                BATCH_TASK_NAME,
                args=(query, [item.model_dump(mode="json") for _, item in part]),
                kwargs={"model_id": self._model_id},
                queue=self._queue,
                # A task still queued past the deadline answers nobody: workers discard it.
                expires=remaining,
            )
            for part in parts
        ]
        try:
            result = group(sigs, app=self.app).apply_async(retry=True, retry_policy=PUBLISH_RETRY)
        except BACKEND_ERRORS as exc:
            log.warning(
                "fact-check broker %s unreachable: %s", redact_url(self.settings.celery.broker_url), exc
            )
            raise UnverifiedError(f"fact-check broker (Redis) unreachable ({type(exc).__name__})") from exc
        sent.append(_Sent(result))
        try:
            values = result.get(
                timeout=max(0.001, deadline - time.monotonic()), interval=POLL_INTERVAL_S, propagate=False
            )
        except CeleryTimeoutError as exc:
            raise UnverifiedError(
                f"no fact-check worker answered {len(sigs)} task(s) on queue {self._queue!r} within the "
                "deadline; start workers with `rampart worker`"
            ) from exc
        except COLLECT_ERRORS as exc:
            log.warning(
                "fact-check result backend %s unreachable: %s",
                redact_url(self.settings.celery.result_backend),
                exc,
            )
            raise UnverifiedError(
                f"fact-check result backend (Redis) unreachable ({type(exc).__name__})"
            ) from exc
        sent[-1].collected = True
        out: dict[str, Evidence] = {}
        for part, value in zip(parts, values, strict=True):
            answers = self._answers([item for _, item in part], value)
            for (key, item), answer in zip(part, answers, strict=True):
                out[key] = self._evidence(item, answer)
        return out

    @staticmethod
    def _answers(items: list[CheckInput], value: Any) -> list[Any]:
        """A batch task's result as one answer per item, or ``UnverifiedError`` naming the batch's
        documents when the task failed as a whole."""
        ids = f"{items[0].chunk_id!r}" + (f" and {len(items) - 1} more" if len(items) > 1 else "")
        if isinstance(value, BaseException):
            log.warning("fact-check task failed for %s: %r", ids, value)
            raise UnverifiedError(f"fact-check task failed for {ids} ({type(value).__name__})")
        if isinstance(value, list) and len(value) == len(items):
            return value
        if isinstance(value, dict) and isinstance(value.get("error"), dict):
            return [value] * len(items)
        raise UnverifiedError(f"fact-check worker returned no evidence for {ids}")

    @staticmethod
    def _evidence(item: CheckInput, value: Any) -> Evidence:
        """One item's answer as evidence, or ``UnverifiedError`` naming the document and why."""
        if isinstance(value, dict) and isinstance(value.get("error"), dict):
            err = value["error"]
            raise UnverifiedError(f"fact-check worker rejected {item.chunk_id!r}: {err.get('message')}")
        try:
            return Evidence.model_validate(value)
        except ValidationError as exc:
            raise UnverifiedError(f"fact-check worker returned no evidence for {item.chunk_id!r}") from exc

    def _release(self, sent: _Sent) -> None:
        """After the caller has its answer, on the thread owning the result subscriptions: stop
        listening for the check's results, revoke what is still pending (only while Redis answers:
        kombu retries a broadcast forever when the broker is down, and the tasks' ``expires`` covers
        that case) and delete the results now rather than at ``result_expires`` (at full traffic
        they would pile up by the gigabyte)."""
        backend = self.app.backend
        results = sent.result.results
        pending = [] if sent.collected or not self._redis_answers() else [r for r in results if not r.ready()]
        for r in results:
            try:
                backend.remove_pending_result(r)
            except Exception as exc:  # the subscription dies with the connection anyway
                log.debug("could not unsubscribe from a fact-check result: %r", exc)
        try:
            if pending:
                self.app.control.revoke([r.id for r in pending])
            backend.client.delete(*[backend.get_key_for_task(r.id) for r in results])
        except Exception as exc:  # best effort: expired tasks are discarded and results expire
            log.debug("could not clean up fact-check tasks: %r", exc)

    def _redis_answers(self) -> bool:
        try:
            return self._broker is None or bool(self._broker.ping())
        except TRANSIENT_ERRORS:
            return False

    # ---- readiness -------------------------------------------------------------------------------
    def check_ready(self) -> None:
        c = self.settings.celery
        for name, client, url in (
            ("broker", self._broker, c.broker_url),
            ("cache", self._cache, self._cache_url),
        ):
            if client is None:
                continue
            try:
                client.ping()
            except TRANSIENT_ERRORS as exc:
                raise RampartError(
                    ErrorCode.UNAVAILABLE,
                    f"fact-check {name} Redis does not answer PING ({type(exc).__name__}); start redis-server "
                    f"or fix RAMPART_FACTCHECK__CELERY__{'BROKER' if name == 'broker' else 'CACHE'}_URL",
                    url=redact_url(url),
                ) from exc
        fut: cf.Future[dict[str, Any] | None] = self._pool.submit(lambda f: _settle(f, self._active_queues))
        try:
            replies = fut.result(timeout=c.ready_timeout_s + c.socket_timeout_s)
        except Exception as exc:
            fut.cancel()
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"fact-check workers could not be asked for readiness ({type(exc).__name__})",
                url=redact_url(c.broker_url),
            ) from exc
        serving = [
            node
            for node, queues in (replies or {}).items()
            if any(q.get("name") == self._queue for q in queues or [])
        ]
        if not serving:
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"no fact-check worker consumes queue {self._queue!r} ({len(replies or {})} worker(s) answered "
                f"within {c.ready_timeout_s:g} s); start one with `rampart worker`",
                queue=self._queue,
            )

    def _active_queues(self) -> dict[str, Any] | None:
        """Ask every worker which queues it consumes (a ping that also names the queues), on a fresh
        connection: a pooled one may be stale after a Redis restart and would fail the probe once."""
        with self.app.connection_for_write() as conn:
            replies: dict[str, Any] | None = self.app.control.inspect(
                timeout=self.settings.celery.ready_timeout_s, connection=conn
            ).active_queues()
            return replies

    def close(self) -> None:
        self._pool.shutdown(wait_s=self.settings.celery.socket_timeout_s)
        for client in (self._cache, self._broker):
            if client is not None:
                client.close()
        self.app.close()
