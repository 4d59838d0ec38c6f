"""The Celery app of the distributed fact-checker and its tasks: evidence for a batch of passages.

Workers (``rampart worker``) run :data:`BATCH_TASK_NAME` on a few passages of one query at a time
(``factcheck.celery.items_per_task``): one embedding call per batch instead of one per passage. The
caller (:class:`~services.factcheck.celery_checker.CeleryFactChecker`) sends the batches as a group
and decides the verdicts itself. :data:`TASK_NAME`, one passage, stays registered for callers from
before batching (a rolling upgrade): it is a batch of one. Evidence is cached in Redis under
``rampart:fc:<passage_key>``, per passage, so a passage judged for a query once is never
re-embedded while the entry lives, whichever worker or batch computed it.

Delivery is at-least-once (``task_acks_late`` + ``task_reject_on_worker_lost``): a worker process
killed mid-task gets its task redelivered, which is safe because the task is a pure function of its
input. Messages are JSON only: nothing a worker receives can execute code when decoded.

``celery -A services.factcheck.celery_app worker`` finds :data:`app` here, built on first access from
``RAMPART_*`` (nothing reads the environment at import); ``rampart worker`` builds it from the CLI's
settings instead.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import redis
from celery import Celery
from celery.signals import worker_process_init
from pydantic import ValidationError
from redis.backoff import NoBackoff
from redis.retry import Retry

from services.common.config import LlmSettings
from services.common.errors import ErrorCode, RampartError, invalid
from services.common.llm_client import llm_model_id
from services.common.metrics import record_request
from services.common.otel import trace_celery_worker
from services.common.redis_server import redact_url
from services.common.settings import RampartSettings
from services.factcheck.config import CelerySettings, FactCheckSettings
from services.factcheck.evidence import (
    EVIDENCE_VERSION,
    CheckInput,
    Evidence,
    bounded_text,
    gather_evidence,
    passage_key,
)
from services.factcheck.llm_judge import LlmJudge, build_judge, judge_enabled
from services.retrieval.config import EmbeddingSettings
from services.retrieval.embedder import Embedder

log = logging.getLogger(__name__)

TASK_NAME = "rampart.factcheck.evidence"  # one passage (callers before batching still send it)
BATCH_TASK_NAME = "rampart.factcheck.evidence_batch"  # one query, several passages
WORKER_SERVICE_NAME = "rampart-factcheck-worker"  # OTel service.name of the worker processes
CACHE_PREFIX = "rampart:fc:"
# Errors worth another try: Redis (cache, broker, results) restarting or briefly unreachable. Never
# validation errors: the same input would fail the same way forever.
TRANSIENT_ERRORS: tuple[type[Exception], ...] = (redis.ConnectionError, redis.TimeoutError)
# A query longer than this is not a search query (the gateway caps queries at 2,000 characters).
MAX_QUERY_CHARS = 100_000
# A check has at most inputs.MAX_ITEMS passages; a larger batch is not from a Rampart caller.
MAX_BATCH_ITEMS = 1_000


def cache_url(settings: CelerySettings) -> str:
    url = settings.cache_url or settings.result_backend
    if urlsplit(url).scheme not in ("redis", "rediss", "unix"):
        raise invalid(
            f"fact-check evidence cache needs a Redis URL, got {redact_url(url)!r}; set "
            "RAMPART_FACTCHECK__CELERY__CACHE_URL (or a redis:// result_backend)",
            field="factcheck.celery.cache_url",
        )
    return url


def redis_client(url: str, settings: CelerySettings) -> redis.Redis:
    """A client that fails fast: bounded connect/read time and no hidden retries (redis-py's default
    backs off for seconds), so a dead Redis costs a check milliseconds, not its whole deadline."""
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=settings.socket_timeout_s,
        socket_timeout=settings.socket_timeout_s,
        retry=Retry(NoBackoff(), 0),
    )


def bounded(item: CheckInput) -> CheckInput:
    """``item`` as a task carries it: text and title as evidence reads them (:func:`bounded_text`),
    so the evidence is unchanged and the message small."""
    text, title = bounded_text(item.text), bounded_text(item.title)
    if text == item.text and title == item.title:
        return item
    return item.model_copy(update={"text": text, "title": title})


def as_sent(items: Sequence[CheckInput]) -> list[CheckInput]:
    """``items`` as a check sends them to the workers (and keys their cached evidence): :func:`bounded`,
    and without their stored embeddings when every item has one. The workers' detectors never read a
    vector and 30 of them as JSON are ~0.25 MB each way, so the caller keeps them and attaches them to
    the evidence itself, as the in-process checker's evidence has them."""
    stored = bool(items) and all(i.vector for i in items)
    return [bounded(i.model_copy(update={"vector": None, "embed": False}) if stored else i) for i in items]


def evidence_key(query: str, item: CheckInput, model_id: str) -> str:
    """Redis key of the cached evidence of ``item`` (already :func:`bounded`) for ``query``."""
    return CACHE_PREFIX + passage_key(query, item, model_id)


def error_result(code: ErrorCode, message: str) -> dict[str, Any]:
    """What the task returns for input it can never judge: an answer, so the message is acked once
    and the caller learns why, instead of a failure the broker might redeliver."""
    return {"error": {"code": code.value, "message": message}}


def evidence_model_id(settings: FactCheckSettings, llm: LlmSettings, embedder_id: str) -> str:
    """What a passage's evidence depends on besides its input: recipe, embedder and, when the
    fact-check consults one, the LLM judge. Caller and workers must compute the same."""
    base = f"{EVIDENCE_VERSION}+{embedder_id}"
    return f"{base}+{llm_model_id(llm)}" if judge_enabled(settings, llm) else base


class WorkerState:
    """Per worker process: the embedder, the LLM judge (if configured) and the cache client, created
    on first use *after* the fork (onnxruntime sessions and sockets must not be shared across prefork
    children). ``load_embedder`` builds the embedder, called once, on first use."""

    def __init__(
        self, settings: FactCheckSettings, llm: LlmSettings, load_embedder: Callable[[], Embedder]
    ) -> None:
        self.settings = settings
        self.llm = llm
        self._load_embedder = load_embedder
        self._lock = threading.Lock()
        self._embedder: Embedder | None = None
        self._judge: LlmJudge | None = None
        self._redis: redis.Redis | None = None

    def embedder(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                self._embedder = self._load_embedder()
                log.info("fact-check worker loaded embedder %s", self._embedder.model_id)
            return self._embedder

    def judge(self) -> LlmJudge | None:
        with self._lock:
            if self._judge is None:
                self._judge = build_judge(self.settings, self.llm)
            return self._judge

    def model_id(self) -> str:
        return evidence_model_id(self.settings, self.llm, self.embedder().model_id)

    def cache(self) -> redis.Redis:
        with self._lock:
            if self._redis is None:
                c = self.settings.celery
                self._redis = redis_client(cache_url(c), c)
            return self._redis


def worker_embedding(settings: EmbeddingSettings, celery: CelerySettings) -> EmbeddingSettings:
    """``embedding.threads = 0`` means all cores; with several prefork children on one node that
    oversubscribes the CPU, so each child takes its share."""
    if settings.threads:
        return settings
    share = max(1, (os.cpu_count() or 1) // celery.concurrency)
    return settings.model_copy(update={"threads": share})


def _query_error(query: Any) -> dict[str, Any] | None:
    if not isinstance(query, str) or not query.strip():
        got = "a blank string" if isinstance(query, str) else type(query).__name__
        return error_result(ErrorCode.INVALID_ARGUMENT, f"query must be a non-empty string, got {got}")
    if len(query) > MAX_QUERY_CHARS:
        return error_result(
            ErrorCode.INVALID_ARGUMENT,
            f"query has {len(query)} characters, more than {MAX_QUERY_CHARS}; shorten it",
        )
    return None


def _item(raw_item: Any) -> CheckInput | dict[str, Any]:
    """``raw_item`` as a bounded :class:`CheckInput`, or the error result saying why it is not one."""
    if not isinstance(raw_item, dict):
        return error_result(
            ErrorCode.INVALID_ARGUMENT,
            f"item must be a JSON object (CheckInput.model_dump()), got {type(raw_item).__name__}",
        )
    try:
        return bounded(CheckInput.model_validate(raw_item))
    except ValidationError as exc:
        fields = ", ".join(".".join(str(p) for p in e["loc"]) or "item" for e in exc.errors()[:5])
        return error_result(
            ErrorCode.INVALID_ARGUMENT,
            f"item is not a CheckInput (bad fields: {fields}); build it with CheckInput(...)",
        )


def _model_error(state: WorkerState, model_id: Any) -> tuple[str, dict[str, Any] | None]:
    """The worker's evidence model id, and the error result when it cannot serve the caller's."""
    try:
        mine = state.model_id()
    except RampartError as exc:  # model missing or unreadable: every task would fail the same way
        return "", error_result(exc.code, exc.message)
    if model_id is not None and model_id != mine:
        return mine, error_result(
            ErrorCode.FAILED_PRECONDITION,
            f"worker evidence model {mine!r} differs from the caller's {model_id!r}; point the workers' "
            "RAMPART_MODELS_DIR (or RAMPART_EMBEDDING__MODEL_DIR) at the caller's model and give them "
            "the caller's RAMPART_LLM__BASE_URL, RAMPART_LLM__MODEL and RAMPART_FACTCHECK__USE_LLM",
        )
    return mine, None


def run_evidence_batch(
    state: WorkerState, query: Any, raw_items: Any, model_id: Any = None
) -> list[dict[str, Any]] | dict[str, Any]:
    """The batch task body: one result per item, in order, each ``Evidence.model_dump()`` or the
    :func:`error_result` that item alone would get from :func:`run_evidence` (a bad item does not
    sink the others). Cache hits are read per item in one ``MGET``; the misses are computed in ONE
    :func:`gather_evidence` call (one embedding batch) and cached per item. ``raw_items`` that is not
    a list of at most :data:`MAX_BATCH_ITEMS` gets one error result for the whole batch. Raises only
    transient Redis errors (retried) and bugs."""
    if not isinstance(raw_items, list) or len(raw_items) > MAX_BATCH_ITEMS:
        got = f"{len(raw_items)} items" if isinstance(raw_items, list) else type(raw_items).__name__
        return error_result(
            ErrorCode.INVALID_ARGUMENT,
            f"items must be a JSON array of at most {MAX_BATCH_ITEMS} CheckInput objects, got {got}; "
            "lower factcheck.celery.items_per_task",
        )
    if (bad_query := _query_error(query)) is not None:
        return [bad_query] * len(raw_items)
    out: list[dict[str, Any] | None] = [None] * len(raw_items)
    items: dict[int, CheckInput] = {}
    for k, raw in enumerate(raw_items):
        item = _item(raw)
        if isinstance(item, CheckInput):
            items[k] = item
        else:
            out[k] = item
    if items:
        mine, bad_model = _model_error(state, model_id)
        if bad_model is not None:
            for k in items:
                out[k] = bad_model
        else:
            for k, ev in _evidence_for(state, query, items, mine).items():
                out[k] = ev
    done = [r for r in out if r is not None]
    assert len(done) == len(out), "every item has a result by now"
    return done


def _evidence_for(
    state: WorkerState, query: str, items: dict[int, CheckInput], model_id: str
) -> dict[int, dict[str, Any]]:
    """Evidence per position: cached, or computed once per distinct passage in one batched call."""
    ttl = state.settings.celery.cache_ttl_s
    keys = {k: evidence_key(query, item, model_id) for k, item in items.items()}
    found: dict[str, dict[str, Any]] = {}
    if ttl:
        distinct = list(dict.fromkeys(keys.values()))
        for key, cached in zip(distinct, state.cache().mget(distinct), strict=True):
            if isinstance(cached, bytes | str):
                try:
                    found[key] = Evidence.model_validate_json(cached).model_dump()
                except ValidationError:
                    log.warning("ignoring unreadable cached evidence", extra={"key": key})
    todo: dict[str, CheckInput] = {}
    for k, key in keys.items():
        if key not in found:
            todo.setdefault(key, items[k])
    # gather_evidence treats a batch all alike (stored vectors, none wanted, or embed): a batch mixing
    # them (never sent by CeleryFactChecker) is computed per kind, so each item gets what it would alone
    kinds: dict[tuple[bool, bool], dict[str, CheckInput]] = {}
    for key, item in todo.items():
        kinds.setdefault((bool(item.vector), item.embed), {})[key] = item
    for part in kinds.values():
        computed = gather_evidence(
            query, list(part.values()), state.embedder(), state.settings, state.judge()
        )
        if ttl:
            with state.cache().pipeline(transaction=False) as pipe:
                for key, ev in zip(part, computed, strict=True):
                    pipe.set(key, ev.model_dump_json(), ex=ttl)
                pipe.execute()
        found.update((key, ev.model_dump()) for key, ev in zip(part, computed, strict=True))
    # identical passages under two chunk ids: each answer names its own chunk
    return {k: {**found[key], "chunk_id": items[k].chunk_id} for k, key in keys.items()}


def run_evidence(state: WorkerState, query: Any, raw_item: Any, model_id: Any = None) -> dict[str, Any]:
    """The single-passage task body (what callers before batching send): a batch of one."""
    results = run_evidence_batch(state, query, [raw_item], model_id)
    return results[0] if isinstance(results, list) else results


T = TypeVar("T")
WORKER_SERVICE = "factcheck-worker"  # the `service` label of the workers' request metrics


def _counted(task: str, run: Callable[[], T]) -> T:
    """``run()``, counted by outcome with its latency (``rampart_requests_total``); an exception
    counts as ``internal`` (Celery then retries or records it)."""
    started = time.perf_counter()
    code = ErrorCode.INTERNAL.value
    try:
        result = run()
        code = _code(result)
        return result
    finally:
        record_request(WORKER_SERVICE, task, code, time.perf_counter() - started)


def _code(result: Any) -> str:
    """``ok``, or the error code of a whole-task error result, or of a batch whose every item is an
    error (e.g. a worker with another model: the caller gets nothing from it)."""
    if isinstance(result, list) and result and all(_code(r) != "ok" for r in result):
        return _code(result[0])
    if isinstance(result, dict) and isinstance(result.get("error"), dict):
        return str(result["error"].get("code", ErrorCode.INTERNAL.value))
    return "ok"


def make_app(settings: RampartSettings) -> Celery:
    """The worker's app (``rampart worker``, ``celery -A``): the fact-check's Celery settings, and the
    embedder, judge and models every worker process loads from the same deployment's settings (so
    it takes them all, as an entry point does)."""
    fc = settings.factcheck

    def load_embedder() -> Embedder:
        from services.retrieval.embedder import build_embedder

        return build_embedder(worker_embedding(settings.embedding, fc.celery), settings.models_dir)

    return configure_app(fc.celery, WorkerState(fc, settings.llm, load_embedder))


def configure_app(c: CelerySettings, state: WorkerState) -> Celery:
    """A Celery app for ``c`` with the evidence tasks registered on it, run with ``state``.

    Apps are independent (not ``current_app``): a process may talk to several brokers, as the tests do.
    """
    cache_url(c)  # fail at start-up, not on the first task, when the cache cannot be Redis
    app = Celery("rampart-factcheck", broker=c.broker_url, backend=c.result_backend, set_as_current=False)
    socket_opts = {
        "socket_connect_timeout": c.socket_timeout_s,
        "socket_timeout": max(c.socket_timeout_s, 5.0),
    }
    app.conf.update(
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_accept_content=["json"],
        task_default_queue=c.queue,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # With late acks, a task running when the broker connection drops is redelivered anyway;
        # cancelling it avoids running it twice (and is Celery 6's default).
        worker_cancel_long_running_tasks_on_connection_loss=True,
        result_expires=c.result_expires_s,
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": c.visibility_timeout_s, **socket_opts},
        redis_socket_connect_timeout=c.socket_timeout_s,
        redis_socket_timeout=max(c.socket_timeout_s, 5.0),
        # The result backend retries a lost Redis 20 times a second apart by default: far past any
        # check's deadline. Two quick tries cover a restart; the checker's deadline covers the rest.
        result_backend_transport_options={
            "retry_policy": {"max_retries": 2, "interval_start": 0, "interval_step": 0.1, "interval_max": 0.2}
        },
    )

    def evidence(query: Any, item: Any, model_id: Any = None) -> dict[str, Any]:
        return _counted("evidence", lambda: run_evidence(state, query, item, model_id))

    def evidence_batch(query: Any, items: Any, model_id: Any = None) -> list[dict[str, Any]] | dict[str, Any]:
        return _counted("evidence_batch", lambda: run_evidence_batch(state, query, items, model_id))

    for name, body in ((TASK_NAME, evidence), (BATCH_TASK_NAME, evidence_batch)):
        app.task(
            name=name,
            autoretry_for=TRANSIENT_ERRORS,
            retry_backoff=True,
            retry_backoff_max=10,
            retry_jitter=True,
            max_retries=c.retries,
        )(body)

    def warm(**_: Any) -> None:
        """Load the model when a worker process starts, so its first task is not the slow one. A
        failure only logs: the task reports it per document (raising here would respawn forever)."""
        try:
            state.embedder()
        except Exception:
            log.exception("fact-check worker could not load the embedding model")

    worker_process_init.connect(warm, weak=False, dispatch_uid=f"rampart-factcheck-warm-{id(state)}")
    # worker children continue the caller's trace (task headers); a no-op in processes that only send
    trace_celery_worker(WORKER_SERVICE_NAME)
    return app


_default: Celery | None = None
_default_lock = threading.Lock()


def default_app() -> Celery:
    """The app built from ``RAMPART_*`` (for ``celery -A services.factcheck.celery_app``)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = make_app(RampartSettings())
        return _default


def __getattr__(name: str) -> Any:
    if name == "app":
        return default_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
