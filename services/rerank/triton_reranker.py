"""The remote :class:`~services.rerank.reranker.Reranker`: a Triton model over gRPC (``tritonclient``).

- Pairs are sent in requests of at most ``batch_size`` rows (capped by the model's ``max_batch_size``);
  requests of one call run concurrently, so Triton's dynamic batcher and instance groups get work.
- One deadline covers the whole call (every request and retry); past it the call raises
  ``DEADLINE_EXCEEDED`` and the rerank stage degrades to fused order.
- Retries (tenacity, exponential backoff) on ``UNAVAILABLE`` only: anything else — a model error, a bad
  input — will not get better by repeating it.
- The model version is pinned (``rerank.triton.model_version``); start-up checks server liveness,
  readiness and that exact version, and reads the model's identity (``model_id`` parameter written by
  ``rampart triton repo``) so cached scores are keyed by the weights actually served.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from services.common.errors import ErrorCode, RampartError
from services.rerank.config import TritonSettings
from services.rerank.reranker import check_pairs


def _status(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    return str(status() if callable(status) else status or "")


def _unavailable(exc: BaseException) -> bool:
    return "UNAVAILABLE" in _status(exc)


class TritonReranker:
    def __init__(
        self,
        client: Any,
        cfg: TritonSettings,
        *,
        model_id: str,
        max_batch: int,
        first_stage_weight: float | None = None,
    ) -> None:
        self._client = client
        self._first_stage_weight = first_stage_weight
        self._cfg = cfg
        self._model_id = model_id
        self._batch = max(1, min(cfg.batch_size, max_batch or cfg.batch_size))
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="triton-rerank")

    @classmethod
    def connect(
        cls, cfg: TritonSettings, *, max_length: int | None = None, wait_s: float = 0.0
    ) -> TritonReranker:
        """Connect and check the server and the pinned model version (waiting up to ``wait_s``)."""
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(cfg.url)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                if (
                    client.is_server_live()
                    and client.is_server_ready()
                    and client.is_model_ready(cfg.model_name, cfg.model_version)
                ):
                    break
                problem = f"model {cfg.model_name!r} version {cfg.model_version or 'latest'!r} is not ready"
            except Exception as exc:  # tritonclient raises InferenceServerException on transport errors
                problem = f"Triton at {cfg.url} is unreachable ({_status(exc) or exc})"
            if time.monotonic() >= deadline:
                client.close()
                raise RampartError(
                    ErrorCode.UNAVAILABLE,
                    f"{problem}; start it with `rampart triton serve` or set RAMPART_RERANK__BACKEND=onnx",
                    url=cfg.url,
                )
            time.sleep(0.5)
        config = client.get_model_config(cfg.model_name, cfg.model_version, as_json=True)["config"]
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        served_length = params.get("max_length")
        if max_length and served_length and int(served_length) != max_length:
            client.close()
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"Triton serves max_length={served_length} but rerank.max_length={max_length}; "
                "rebuild the repository with `rampart triton repo --max-length` or unset it",
            )
        model_id = params.get("model_id") or f"triton:{cfg.model_name}"
        model_id = f"{model_id}@v{cfg.model_version or 'latest'}"
        weight = params.get("first_stage_weight") or None
        return cls(
            client,
            cfg,
            model_id=model_id,
            max_batch=int(config.get("max_batch_size", 0)),
            first_stage_weight=float(weight) if weight else None,
        )

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def first_stage_weight(self) -> float | None:
        return self._first_stage_weight

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        items = check_pairs(query, passages)
        if not items:
            return []
        deadline = time.monotonic() + self._cfg.deadline_ms / 1000
        spans = [(i, min(i + self._batch, len(items))) for i in range(0, len(items), self._batch)]
        if len(spans) == 1:  # the usual case (one query's candidates): no hand-off to the pool
            return self._infer_retrying(query, items, deadline)
        # each batch runs in a copy of this context: its gRPC span joins the request's trace
        futures = [
            self._pool.submit(
                contextvars.copy_context().run, self._infer_retrying, query, items[a:b], deadline
            )
            for a, b in spans
        ]
        out: list[float] = []
        for f in futures:
            out.extend(f.result())
        return out

    def _infer_retrying(self, query: str, passages: list[str], deadline: float) -> list[float]:
        try:
            for attempt in Retrying(
                retry=retry_if_exception(_unavailable),
                stop=stop_after_attempt(self._cfg.retries + 1),
                wait=wait_exponential(multiplier=0.05, max=1.0),
                reraise=True,
            ):
                with attempt:
                    return self._infer(query, passages, deadline)
        except RetryError as exc:  # pragma: no cover - reraise=True re-raises the last error instead
            raise self._map(exc.last_attempt.exception() or exc) from exc
        except Exception as exc:
            raise self._map(exc) from exc
        raise AssertionError("unreachable")

    def _infer(self, query: str, passages: list[str], deadline: float) -> list[float]:
        import tritonclient.grpc as grpcclient

        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise RampartError(
                ErrorCode.DEADLINE_EXCEEDED, f"rerank deadline of {self._cfg.deadline_ms} ms passed"
            )
        n = len(passages)
        q = np.array([[query.encode("utf-8", "replace")]] * n, dtype=object)
        p = np.array([[t.encode("utf-8", "replace")] for t in passages], dtype=object)
        inputs = [
            grpcclient.InferInput("QUERY", [n, 1], "BYTES"),
            grpcclient.InferInput("PASSAGE", [n, 1], "BYTES"),
        ]
        inputs[0].set_data_from_numpy(q)
        inputs[1].set_data_from_numpy(p)
        result = self._client.infer(
            self._cfg.model_name,
            inputs,
            model_version=self._cfg.model_version,
            outputs=[grpcclient.InferRequestedOutput("SCORE")],
            client_timeout=remaining,
        )
        scores = result.as_numpy("SCORE")
        if scores is None or scores.size != n:
            raise RampartError(
                ErrorCode.INTERNAL,
                f"Triton returned {0 if scores is None else scores.size} scores for {n} pairs",
            )
        return [float(x) for x in scores.reshape(-1)]

    def _map(self, exc: BaseException) -> RampartError:
        if isinstance(exc, RampartError):
            return exc
        status = _status(exc)
        message = getattr(exc, "message", None)
        text = message() if callable(message) else str(exc)
        if "DEADLINE_EXCEEDED" in status:
            return RampartError(
                ErrorCode.DEADLINE_EXCEEDED, f"Triton rerank timed out ({self._cfg.deadline_ms} ms)"
            )
        if "UNAVAILABLE" in status:
            return RampartError(ErrorCode.UNAVAILABLE, f"Triton at {self._cfg.url} is unavailable: {text}")
        return RampartError(
            ErrorCode.INTERNAL, f"Triton rerank failed ({status or type(exc).__name__}): {text}"
        )

    def check_ready(self) -> None:
        try:
            ok = self._client.is_model_ready(self._cfg.model_name, self._cfg.model_version)
        except Exception as exc:
            raise RampartError(
                ErrorCode.UNAVAILABLE, f"Triton at {self._cfg.url} is unreachable: {exc}"
            ) from exc
        if not ok:
            raise RampartError(ErrorCode.UNAVAILABLE, f"Triton model {self._cfg.model_name} is not ready")

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def __repr__(self) -> str:
        return f"TritonReranker(url={self._cfg.url!r}, model_id={self._model_id!r})"
