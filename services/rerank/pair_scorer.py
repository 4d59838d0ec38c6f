"""Score (query, passage) pairs with an exported cross-encoder: tokenizers + onnxruntime + numpy only.

This one file is the scoring code of both serving paths: :class:`services.rerank.onnx_reranker.OnnxReranker`
imports it in-process, and the Triton python-backend model copies it next to its ``model.py``
(:mod:`services.rerank.triton_repository`), so the two cannot drift. It must therefore import nothing
from ``services`` and run on numpy 1.x (Triton's venv) as well as 2.x.

Pairs are encoded ``[CLS] query [SEP] passage [SEP]`` with longest-first truncation (a long passage is
cut, never rejected; a very long query is cut too rather than failing). Text past
:data:`MAX_CHARS_PER_TOKEN` characters per token of ``max_length`` is dropped before tokenising: the
tokenizer would cut it anyway, after spending time linear in it (7 s for a 5 MB passage). Dynamic int8 models compute
activation scales per batch (padding included), so with ``batch_size > 1`` a pair's int8 logit moves
with the company it is batched in (by up to ~0.9 measured); ``batch_size=1`` (the serving default)
makes scores batch-invariant, which the score cache relies on, and costs nothing on CPU. Encodings are length-sorted and
batched so padding stays small, and batches are capped in padded tokens so one call with thousands of
pairs never allocates more than a normal batch does.

On CPU the batches run *side by side*, one onnxruntime thread each, one call per core (``parallel``):
measured on the 2-core machine, two single-thread calls at a time scored 51-58 pairs/s in every run,
where one call with two intra-op threads swung between 33 and 55 (its threads wait on each other at
every operator, and a core the machine lends elsewhere for a moment stalls both). Scores do not change:
each call is one batch, as before.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from tokenizers import Encoding, Tokenizer

# BERT position embeddings: nothing longer can be represented.
MAX_POSITIONS = 512
# Padded tokens per onnxruntime call (32 pairs x 256 tokens): beyond this CPU batches only get slower.
MAX_BATCH_TOKENS = 32 * 256
# A model token is rarely more than a dozen characters of text: anything past this many characters per
# token of the model's length would be truncated anyway, so it is never tokenised.
MAX_CHARS_PER_TOKEN = 16


def configure_tokenizer(tokenizer: Tokenizer, max_length: int) -> Tokenizer:
    """Truncate pairs longest-first to ``max_length``; padding is done per batch by :func:`pad_batch`."""
    if not 8 <= max_length <= MAX_POSITIONS:
        raise ValueError(f"reranker max_length must be in [8, {MAX_POSITIONS}], got {max_length}")
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length, strategy="longest_first")
    return tokenizer


def clean_text(text: str) -> str:
    """Text the tokenizer accepts: lone surrogates (e.g. from bytes decoded with surrogateescape) are
    replaced, never fatal."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def encode_pairs(tokenizer: Tokenizer, query: str, passages: Sequence[str]) -> list[Encoding]:
    """Encode ``(query, passage)`` pairs with the tokenizer's pair template ([CLS] q [SEP] p [SEP])."""
    q = clean_text(query)
    return list(tokenizer.encode_batch([(q, clean_text(p)) for p in passages], add_special_tokens=True))


def pad_batch(encodings: Sequence[Encoding]) -> dict[str, np.ndarray]:
    """``input_ids``/``attention_mask``/``token_type_ids`` int64 arrays padded to the longest pair."""
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    types = np.zeros_like(ids)
    for row, enc in enumerate(encodings):
        n = len(enc.ids)
        ids[row, :n] = enc.ids
        mask[row, :n] = enc.attention_mask
        types[row, :n] = enc.type_ids
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def length_batches(
    lengths: Sequence[int], batch_size: int, max_tokens: int = MAX_BATCH_TOKENS
) -> list[list[int]]:
    """Index batches of similar length, longest first: at most ``batch_size`` pairs and ``max_tokens``
    padded tokens each (always at least one pair). The batches partition ``range(len(lengths))``."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    start = 0
    while start < len(order):
        take = min(batch_size, max(1, max_tokens // max(1, lengths[order[start]])))
        batches.append(order[start : start + take])
        start += take
    return batches


def cpu_cores() -> int:
    """Cores this process may run on (its affinity, which containers and ``taskset`` narrow)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def side_by_side(threads: int, parallel: int, cores: int | None = None) -> int:
    """onnxruntime calls to run at once: ``parallel`` if set (> 0), else as many ``threads``-thread
    calls as the cores hold, else (``threads`` 0 = all cores per call) one."""
    if parallel > 0:
        return parallel
    if threads <= 0:
        return 1
    return max(1, (cores or cpu_cores()) // threads)


class PairScorer:
    """A loaded cross-encoder: ``score(query, passages)`` returns one relevance logit per passage."""

    def __init__(
        self, session: Any, tokenizer: Tokenizer, *, max_length: int, batch_size: int, parallel: int = 1
    ) -> None:
        if parallel < 1:
            raise ValueError(f"parallel must be >= 1 onnxruntime call at a time, got {parallel}")
        self.session = session
        self.tokenizer = configure_tokenizer(tokenizer, max_length)
        self.max_length = max_length
        self.batch_size = batch_size
        self.parallel = parallel
        # shared by every caller: N callers at once still run ``parallel`` onnxruntime calls, not N x it
        self._pool: ThreadPoolExecutor | None = None
        self._pool_pid = 0
        self._closed = False
        self._inputs = {i.name for i in session.get_inputs()}
        output = session.get_outputs()[0]
        self._output = output.name
        width = output.shape[-1] if len(output.shape) > 1 else 1
        # logits per pair: fixed by the exported head (1 for a reranker); a symbolic width reads as 1
        self.outputs = width if isinstance(width, int) and width > 0 else 1

    @classmethod
    def load(
        cls,
        model_path: str,
        tokenizer_path: str,
        *,
        max_length: int,
        batch_size: int = 32,
        threads: int = 0,
        parallel: int = 1,
        providers: Sequence[str] = ("CPUExecutionProvider",),
    ) -> PairScorer:
        """Open an ONNX file and its ``tokenizer.json``; ``threads`` per onnxruntime call (0 = all
        cores), ``parallel`` calls at once (0 = :func:`side_by_side`; always 1 on a GPU provider, where
        one larger batch is the way to fill the device)."""
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        if threads > 0:
            options.intra_op_num_threads = threads
        options.log_severity_level = 3
        available = set(ort.get_available_providers())
        chosen = [p for p in providers if p in available] or ["CPUExecutionProvider"]
        session = ort.InferenceSession(model_path, sess_options=options, providers=chosen)
        calls = side_by_side(threads, parallel) if chosen[0] == "CPUExecutionProvider" else 1
        return cls(
            session,
            Tokenizer.from_file(tokenizer_path),
            max_length=max_length,
            batch_size=batch_size,
            parallel=calls,
        )

    def _executor(self) -> ThreadPoolExecutor | None:
        """The pool, made on first use in this process: a forked child (a prefork worker) inherits the
        parent's pool object but not its threads, and work handed to it would never run."""
        if self.parallel < 2 or self._closed:
            return None
        if self._pool is None or self._pool_pid != os.getpid():
            self._pool = ThreadPoolExecutor(self.parallel, thread_name_prefix="pair-scorer")
            self._pool_pid = os.getpid()
        return self._pool

    def close(self) -> None:
        """Stop the pool's threads; later calls still score, one batch after another."""
        self._closed = True
        pool, self._pool = self._pool, None
        if pool is not None and self._pool_pid == os.getpid():
            pool.shutdown(wait=True)

    def score(self, query: str, passages: Sequence[str]) -> np.ndarray:
        """float32 logits, one per passage, in input order (higher = more relevant)."""
        return self.score_pairs([(query, p) for p in passages])

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """float32 logits for ``(query, passage)`` pairs of any queries (Triton merges requests)."""
        return self.logits_pairs(pairs)[:, 0]

    def logits_pairs(self, pairs: Sequence[tuple[str, str]]) -> np.ndarray:
        """float32 ``(n, outputs)`` logits of a model with several outputs per pair (a 3-way
        classifier's SUPPORT/CONTRADICT/NEI); rows in input order."""
        out = np.empty((len(pairs), self.outputs), dtype=np.float32)
        if not len(pairs):
            return out
        cut = self.max_length * MAX_CHARS_PER_TOKEN
        cleaned = [(clean_text(a[:cut]), clean_text(b[:cut])) for a, b in pairs]
        encodings = list(self.tokenizer.encode_batch(cleaned, add_special_tokens=True))
        batches = length_batches([len(e.ids) for e in encodings], self.batch_size)

        def run(batch: list[int]) -> np.ndarray:
            feeds = pad_batch([encodings[i] for i in batch])
            feeds = {k: v for k, v in feeds.items() if k in self._inputs}
            logits = self.session.run([self._output], feeds)[0]
            return np.asarray(logits, dtype=np.float32).reshape(len(batch), -1)[:, : self.outputs]

        # onnxruntime releases the GIL in run(), so the pool's calls overlap on the cores
        pool = self._executor() if len(batches) > 1 else None
        results = pool.map(run, batches) if pool is not None else map(run, batches)
        for batch, logits in zip(batches, results, strict=True):
            out[batch] = logits
        return out
