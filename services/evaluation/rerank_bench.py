"""``rampart bench rerank``: cross-encoder throughput and latency per backend, batch size and concurrency.

Every backend scores the same (query, passage) pairs, each passage long enough to fill ``tokens``
tokens, so figures compare compute, not text. Backends: PyTorch (an HF folder, if given), onnxruntime
fp32 and int8 in-process, and Triton over gRPC (python backend, same ONNX file) at concurrency 1 and
16. The figure to watch is Triton/in-process throughput at equal batch and concurrency.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ScoreFn = Callable[[str, Sequence[str]], Any]

QUERY = "what are the effects of insulin resistance on the liver"
_TEXT = (
    "Insulin resistance in the liver impairs the suppression of glucose production and promotes lipid "
    "synthesis, which together raise fasting glucose and triglycerides. Hepatic steatosis often follows, "
    "and inflammatory signalling through kinases such as JNK further blunts insulin receptor substrate "
    "phosphorylation. Clinical studies link these changes to type 2 diabetes and cardiovascular risk. "
)


def bench_passages(n: int, tokens: int) -> list[str]:
    """``n`` distinct passages of at least ``tokens`` word pieces (truncated to it by the scorer)."""
    body = _TEXT * (tokens // 50 + 2)
    return [f"Passage {i}. {body}" for i in range(n)]


def torch_scorer(hf_dir: Path, max_length: int, threads: int = 0) -> ScoreFn:
    """PyTorch fp32 reference with the serving tokenizer (needs the [build] extra)."""
    import torch
    from tokenizers import Tokenizer

    from services.models.torch_reranker import load_torch_reranker
    from services.rerank.pair_scorer import configure_tokenizer, encode_pairs, pad_batch

    if threads:
        torch.set_num_threads(threads)
    model = load_torch_reranker(hf_dir, attn="sdpa")
    tok = configure_tokenizer(Tokenizer.from_file(str(hf_dir / "tokenizer.json")), max_length)

    def score(query: str, passages: Sequence[str]) -> Any:
        feeds = {k: torch.from_numpy(v) for k, v in pad_batch(encode_pairs(tok, query, passages)).items()}
        with torch.no_grad():
            return model(**feeds).logits[:, 0].numpy()

    return score


def measure(
    score: ScoreFn,
    *,
    batch: int,
    tokens: int = 256,
    concurrency: int = 1,
    min_pairs: int = 64,
    warmup: int = 1,
) -> dict[str, float]:
    """pairs/s over the whole run and p50/p95 latency per call of ``batch`` pairs."""
    passages = bench_passages(batch, tokens)
    calls = max(concurrency * 2, -(-min_pairs // batch))
    for _ in range(warmup):
        score(QUERY, passages)
    latencies: list[float] = []

    def one(_: int) -> None:
        t0 = time.perf_counter()
        score(QUERY, passages)
        latencies.append((time.perf_counter() - t0) * 1000)

    t0 = time.perf_counter()
    if concurrency == 1:
        for i in range(calls):
            one(i)
    else:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            list(pool.map(one, range(calls)))
    wall = time.perf_counter() - t0
    latencies.sort()
    return {
        "pairs_per_s": round(calls * batch / wall, 1),
        "p50_ms": round(statistics.median(latencies), 1),
        "p95_ms": round(latencies[min(len(latencies) - 1, int(0.95 * len(latencies)))], 1),
        "calls": float(calls),
    }


def run_rerank_bench(
    backends: dict[str, ScoreFn],
    *,
    batches: Sequence[int] = (1, 8, 32),
    tokens: int = 256,
    concurrency: Mapping[str, Sequence[int]] | None = None,
    min_pairs: int = 64,
    progress: Callable[[str, int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per (backend, batch, concurrency)."""
    conc = concurrency or {}
    plan = [(name, b, c) for name in backends for b in batches for c in conc.get(name, (1,))]
    rows: list[dict[str, Any]] = []
    for i, (name, b, c) in enumerate(plan, start=1):
        rows.append(
            {
                "backend": name,
                "batch": b,
                "concurrency": c,
                **measure(backends[name], batch=b, tokens=tokens, concurrency=c),
            }
        )
        if progress:
            progress("bench rerank", i, len(plan))
    return rows


def ratios(rows: list[dict[str, Any]], remote: str, local: str) -> list[dict[str, Any]]:
    """Remote/in-process throughput at equal batch and concurrency."""
    index = {(r["backend"], r["batch"], r["concurrency"]): r for r in rows}
    out = []
    for (name, b, c), r in index.items():
        base = index.get((local, b, c))
        if name == remote and base:
            out.append(
                {"batch": b, "concurrency": c, "ratio": round(r["pairs_per_s"] / base["pairs_per_s"], 3)}
            )
    return out
