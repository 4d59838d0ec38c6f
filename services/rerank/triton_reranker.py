"""The remote :class:`~services.rerank.reranker.Reranker`: a Triton model over gRPC (``tritonclient``).

- Pairs are sent in requests of at most ``batch_size`` rows (capped by the model's ``max_batch_size``);
  requests of one call run concurrently, so Triton's dynamic batcher and instance groups get work.
- One deadline covers the whole call (every request and retry); past it the call raises
  ``DEADLINE_EXCEEDED`` and the rerank stage degrades to fused order.
- Retries (tenacity, exponential backoff) on ``UNAVAILABLE`` only: anything else — a model error, a bad
  input — will not get better by repeating it.
- TLS (``rerank.triton.tls``): the CA that signed Triton's certificate, and the component's own
  certificate for a Triton that requires one (``--grpc-use-ssl-mutual``); files read once, at connect.
- The caller key (``rerank.triton.key``, :mod:`~services.rerank.triton_key`) goes with every call, so a
  Triton that requires it serves this client and no one else without it.
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

import grpc
import numpy as np
from tenacity import RetryError, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from services.common.errors import ErrorCode, RampartError
from services.common.service_auth import read_pem
from services.rerank.config import TritonSettings, TritonTlsSettings
from services.rerank.reranker import check_pairs
from services.rerank.triton_key import client_headers, is_refusal


def _status(exc: BaseException) -> str:
    status = getattr(exc, "status", None)
    return str(status() if callable(status) else status or "")


def _message(exc: BaseException) -> str:
    message = getattr(exc, "message", None)
    return str(message() if callable(message) else exc)


def _refused(exc: BaseException) -> bool:
    """Triton's answer to a call without the key (gRPC UNAVAILABLE with its restriction text)."""
    return is_refusal(_message(exc))


def _unavailable(exc: BaseException) -> bool:
    """A down or restarting server (worth retrying); never a refused key, which Triton also reports
    as UNAVAILABLE."""
    return "UNAVAILABLE" in _status(exc) and not _refused(exc)


def triton_credentials(
    tls: TritonTlsSettings,
) -> tuple[grpc.ChannelCredentials | None, list[tuple[str, Any]]]:
    """Channel credentials and extra options for Triton (``(None, [])``: plaintext). The PEM files are
    read here, so a missing one fails the start naming its variable instead of every handshake."""
    if not tls.enabled:
        return None, []
    group = "rerank.triton.tls"
    ca = read_pem("ca_file", tls.ca_file, group)
    cert = read_pem("cert_file", tls.cert_file, group) if tls.cert_file is not None else None
    key = read_pem("key_file", tls.key_file, group) if tls.key_file is not None else None
    credentials = grpc.ssl_channel_credentials(root_certificates=ca, private_key=key, certificate_chain=cert)
    options = [("grpc.ssl_target_name_override", tls.server_name)] if tls.server_name else []
    return credentials, options


def triton_client(cfg: TritonSettings) -> Any:
    """tritonclient's gRPC client for ``cfg.url``: plaintext, or TLS per ``cfg.tls``."""
    import tritonclient.grpc as grpcclient

    credentials, options = triton_credentials(cfg.tls)
    if credentials is None:
        return grpcclient.InferenceServerClient(cfg.url)
    if not options:  # tritonclient's own channel options (message sizes, keepalive) stay
        return grpcclient.InferenceServerClient(cfg.url, creds=credentials)
    from tritonclient.grpc._client import MAX_GRPC_MESSAGE_SIZE

    keepalive = grpcclient.KeepAliveOptions()
    defaults = [  # channel_args replaces tritonclient's defaults: these are they
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE),
        ("grpc.keepalive_time_ms", keepalive.keepalive_time_ms),
        ("grpc.keepalive_timeout_ms", keepalive.keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", keepalive.keepalive_permit_without_calls),
        ("grpc.http2.max_pings_without_data", keepalive.http2_max_pings_without_data),
    ]
    return grpcclient.InferenceServerClient(cfg.url, creds=credentials, channel_args=[*defaults, *options])


class TritonReranker:
    def __init__(
        self,
        client: Any,
        cfg: TritonSettings,
        *,
        model_id: str,
        max_batch: int,
        first_stage_weight: float | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self._client = client
        self._headers = headers
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
        client = triton_client(cfg)
        headers = client_headers(cfg.key.get_secret_value() if cfg.key is not None else None)
        deadline = time.monotonic() + wait_s
        while True:
            try:
                if (
                    client.is_server_live(headers=headers)
                    and client.is_server_ready(headers=headers)
                    and client.is_model_ready(cfg.model_name, cfg.model_version, headers=headers)
                ):
                    break
                problem = f"model {cfg.model_name!r} version {cfg.model_version or 'latest'!r} is not ready"
            except Exception as exc:  # tritonclient raises InferenceServerException on transport errors
                problem = f"Triton at {cfg.url} is unreachable ({_status(exc) or exc})"
                if cfg.tls.enabled:  # a refused handshake looks like an unreachable server
                    problem += " over TLS: check rerank.triton.tls (its CA, server_name, client certificate)"
            if time.monotonic() >= deadline:
                client.close()
                raise RampartError(
                    ErrorCode.UNAVAILABLE,
                    f"{problem}; start it with `rampart triton serve` or set RAMPART_RERANK__BACKEND=onnx",
                    url=cfg.url,
                )
            time.sleep(0.5)
        try:
            config = client.get_model_config(cfg.model_name, cfg.model_version, headers=headers, as_json=True)
        except Exception as exc:  # the first call past health: a missing or wrong key shows here
            client.close()
            if _refused(exc):
                raise RampartError(
                    ErrorCode.PERMISSION_DENIED,
                    f"Triton at {cfg.url} refused to describe model {cfg.model_name!r}: it requires the caller "
                    "key; set RAMPART_RERANK__TRITON__KEY to the key it was started with",
                    url=cfg.url,
                ) from exc
            raise RampartError(
                ErrorCode.UNAVAILABLE,
                f"Triton at {cfg.url} did not describe model {cfg.model_name!r} ({_status(exc) or exc})",
                url=cfg.url,
            ) from exc
        config = config["config"]
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
            headers=headers,
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
            headers=self._headers,
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
        text = _message(exc)
        if _refused(exc):
            return RampartError(
                ErrorCode.PERMISSION_DENIED,
                f"Triton at {self._cfg.url} refused the call: it requires the caller key; set "
                "RAMPART_RERANK__TRITON__KEY to the key it was started with",
            )
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
            ok = self._client.is_model_ready(
                self._cfg.model_name, self._cfg.model_version, headers=self._headers
            )
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
