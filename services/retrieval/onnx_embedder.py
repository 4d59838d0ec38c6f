"""The embedded :class:`~services.retrieval.embedder.Embedder`: all-MiniLM-L6-v2 on onnxruntime (CPU).

Reads a folder written by :func:`services.models.embedder_export.export_embedder` (``model.onnx``,
``tokenizer.json``, ``manifest.json``). The graph returns token states; mean pooling over the attention
mask and L2 normalisation happen here in numpy (:func:`mean_pool_normalize`), which reproduces
sentence-transformers' output to ~1e-6.

Throughput: texts are tokenized once, sorted by token count within windows and batched with their
neighbours, so a batch is padded only to the length of its own longest text; results come back in
input order. Concurrent :meth:`OnnxEmbedder.embed` calls are safe: the tokenizer is configured once at
load and only read afterwards (padding is done here, not by the tokenizer), and onnxruntime sessions
are thread-safe.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Encoding, Tokenizer

from services.common.errors import ErrorCode, RampartError, invalid
from services.retrieval.embedder import Matrix

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "manifest.json"
# Upper bound of BERT position embeddings; longer inputs cannot be represented.
_MAX_POSITIONS = 512
# Texts are length-sorted within windows of this many batches: nearly all of the padding saving of a
# global sort while holding only one window of encodings in memory.
_SORT_WINDOW_BATCHES = 64
# Cap on padded tokens per inference call (32 texts x 256 tokens): bounds the attention buffers when a
# large batch_size meets long texts (measured: batches beyond ~32 x 256 only get slower on CPU).
_MAX_BATCH_TOKENS = 32 * 256


def mean_pool_normalize(hidden: npt.NDArray[np.float32], mask: npt.NDArray[Any]) -> Matrix:
    """Mean of ``hidden`` (b, s, d) over positions where ``mask`` (b, s) is non-zero, then L2-normalised.

    Matches sentence-transformers: token count clamped at 1e-9, norm clamped at 1e-12 (so an all-zero
    row stays zero instead of becoming NaN).
    """
    weights = mask.astype(np.float32, copy=False)
    summed = np.matmul(weights[:, None, :], hidden)[:, 0, :]
    counts = np.maximum(weights.sum(axis=1, keepdims=True), np.float32(1e-9))
    mean = summed / counts
    norms = np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), np.float32(1e-12))
    out: Matrix = (mean / norms).astype(np.float32, copy=False)
    return out


def length_sorted_batches(
    lengths: Sequence[int], batch_size: int, max_tokens: int | None = None
) -> list[npt.NDArray[np.intp]]:
    """Index batches grouping texts of similar length, longest first.

    Each batch has at most ``batch_size`` texts and, if ``max_tokens`` is given, at most
    ``max_tokens`` padded tokens (but always at least one text). The batches partition
    ``range(len(lengths))``.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    sizes = np.asarray(lengths, dtype=np.int64)
    order = np.argsort(-sizes, kind="stable")
    batches: list[npt.NDArray[np.intp]] = []
    start = 0
    while start < len(order):
        take = batch_size
        if max_tokens is not None:
            # Sorted descending, so the first text of the batch sets its padded width.
            take = min(take, max(1, max_tokens // max(1, int(sizes[order[start]]))))
        batches.append(order[start : start + take])
        start += take
    return batches


def _not_found(path: Path, what: str) -> RampartError:
    return RampartError(
        ErrorCode.FAILED_PRECONDITION,
        f"embedding model not found at {path}; run `rampart models build`",
        path=str(path),
        missing=what,
    )


class OnnxEmbedder:
    """all-MiniLM-L6-v2 embeddings (384-d, L2-normalised float32) from an exported ONNX folder."""

    def __init__(
        self,
        session: Any,
        tokenizer: Tokenizer,
        *,
        model_id: str,
        dim: int,
        batch_size: int = 32,
        max_length: int = 256,
    ) -> None:
        """Wrap a ready session and tokenizer; prefer :meth:`from_dir`. Configures ``tokenizer``."""
        if batch_size < 1:
            raise invalid(f"embedding batch_size must be >= 1, got {batch_size}")
        if not 2 <= max_length <= _MAX_POSITIONS:
            raise invalid(f"embedding max_length must be in [2, {_MAX_POSITIONS}], got {max_length}")
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length)
        self._session = session
        self._tokenizer = tokenizer
        self._model_id = model_id
        self._dim = dim
        self._batch_size = batch_size
        self._max_length = max_length
        names = {i.name for i in session.get_inputs()}
        if not {"input_ids", "attention_mask"} <= names:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"embedding model inputs {sorted(names)} lack input_ids/attention_mask; "
                "rebuild with `rampart models build --force`",
            )
        self._with_token_types = "token_type_ids" in names
        self._output = session.get_outputs()[0].name

    @classmethod
    def from_dir(
        cls,
        path: Path,
        *,
        batch_size: int = 32,
        max_length: int = 256,
        threads: int = 0,
        spin_wait: bool = False,
    ) -> OnnxEmbedder:
        """Load ``path`` (model.onnx + tokenizer.json + manifest.json); ``threads`` 0 = all cores.
        ``spin_wait`` lets onnxruntime's threads busy-wait for the next call (EmbeddingSettings says
        why it is off by default)."""
        import onnxruntime as ort

        path = Path(path)
        if not path.is_dir():
            raise _not_found(path, "folder")
        for name in (MODEL_FILE, TOKENIZER_FILE, MANIFEST_FILE):
            if not (path / name).is_file():
                raise _not_found(path, name)
        try:
            manifest = json.loads((path / MANIFEST_FILE).read_text(encoding="utf-8"))
            base_id, sha, dim = str(manifest["model_id"]), str(manifest["sha256"]), int(manifest["dim"])
            trained_length = int(manifest.get("max_length", max_length))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"embedding model manifest {path / MANIFEST_FILE} is unreadable ({exc}); "
                "run `rampart models build --force`",
                path=str(path),
            ) from exc

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        if threads > 0:
            options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin_wait else "0")
        options.log_severity_level = 3  # errors only; fused-op notices are noise
        try:
            session = ort.InferenceSession(
                str(path / MODEL_FILE), sess_options=options, providers=["CPUExecutionProvider"]
            )
            tokenizer = Tokenizer.from_file(str(path / TOKENIZER_FILE))
        except Exception as exc:  # onnxruntime raises its own untyped exceptions
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"embedding model at {path} cannot be loaded ({exc}); run `rampart models build --force`",
                path=str(path),
            ) from exc

        out_dim = session.get_outputs()[0].shape[-1]
        if isinstance(out_dim, int) and out_dim != dim:
            raise RampartError(
                ErrorCode.FAILED_PRECONDITION,
                f"embedding model at {path} outputs {out_dim}-d states but its manifest says dim={dim}; "
                "run `rampart models build --force`",
                path=str(path),
            )
        # Truncation length changes the vectors of long texts, so it is part of the identity when it
        # differs from the length the model was built for.
        model_id = f"{base_id}@{sha[:12]}"
        if max_length != trained_length:
            model_id += f"+len{max_length}"
        return cls(
            session, tokenizer, model_id=model_id, dim=dim, batch_size=batch_size, max_length=max_length
        )

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def max_length(self) -> int:
        return self._max_length

    def __repr__(self) -> str:
        return f"OnnxEmbedder(model_id={self._model_id!r}, batch_size={self._batch_size})"

    def embed(self, texts: Sequence[str]) -> Matrix:
        if isinstance(texts, str):
            raise TypeError("embed() takes a sequence of texts, not a single str; wrap it in a list")
        items = list(texts)
        out = np.empty((len(items), self._dim), dtype=np.float32)
        window = self._batch_size * _SORT_WINDOW_BATCHES
        for start in range(0, len(items), window):
            chunk = items[start : start + window]
            encodings = self._tokenizer.encode_batch_fast(chunk, add_special_tokens=True)
            lengths = [len(e.ids) for e in encodings]
            for batch in length_sorted_batches(lengths, self._batch_size, _MAX_BATCH_TOKENS):
                out[start + batch] = self._run([encodings[i] for i in batch])
        return out

    def _run(self, encodings: list[Encoding]) -> Matrix:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros((len(encodings), width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            n = len(enc.ids)
            ids[row, :n] = enc.ids
            mask[row, :n] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if self._with_token_types:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run([self._output], feeds)[0]
        return mean_pool_normalize(hidden, mask)
