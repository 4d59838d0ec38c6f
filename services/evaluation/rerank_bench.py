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
from typing import TYPE_CHECKING, Any

from services.evaluation.metrics import latency_ms_p50, latency_ms_p95

if TYPE_CHECKING:
    from services.common.settings import RampartSettings

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


def measure_group(
    scores: Mapping[str, ScoreFn],
    *,
    batch: int,
    tokens: int = 256,
    concurrency: int = 1,
    min_pairs: int = 64,
    warmup: int = 1,
    rounds: int = 4,
) -> dict[str, dict[str, Any]]:
    """pairs/s and p50/p95 per call of ``batch`` pairs for each backend at one batch and concurrency.

    The backends take turns in ``rounds`` rounds (the order rotating each round) rather than one after
    the other: a shared machine's speed drifts by tens of percent over a minute, and a ratio of two
    backends measured a minute apart measured the drift as much as the backends. Every round keeps
    each backend's own pairs/s (``round_pairs_per_s``) so :func:`ratios` can also pair backends round
    by round, the closest in time two measurements get.
    """
    passages = bench_passages(batch, tokens)
    rounds = max(1, rounds)
    calls = max(concurrency * max(2, rounds), -(-min_pairs // batch))  # every round fills the pool
    per_round = -(-calls // rounds)
    names = list(scores)
    for name in names:
        for _ in range(warmup):
            scores[name](QUERY, passages)
    latencies: dict[str, list[float]] = {name: [] for name in names}
    wall = dict.fromkeys(names, 0.0)
    done = dict.fromkeys(names, 0)
    per_round_rate: dict[str, list[float]] = {name: [] for name in names}

    def one(name: str) -> None:
        t0 = time.perf_counter()
        scores[name](QUERY, passages)
        latencies[name].append((time.perf_counter() - t0) * 1000)

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                t0 = time.perf_counter()
                if concurrency == 1:
                    for _ in range(per_round):
                        one(name)
                else:
                    list(pool.map(one, [name] * per_round))
                took = time.perf_counter() - t0
                wall[name] += took
                done[name] += per_round
                per_round_rate[name].append(round(per_round * batch / took, 1))
    return {
        name: {
            "pairs_per_s": round(done[name] * batch / wall[name], 1),
            "p50_ms": round(latency_ms_p50(latencies[name]), 1),
            "p95_ms": round(latency_ms_p95(latencies[name]), 1),
            "calls": float(done[name]),
            "round_pairs_per_s": per_round_rate[name],
        }
        for name in names
    }


def measure(
    score: ScoreFn,
    *,
    batch: int,
    tokens: int = 256,
    concurrency: int = 1,
    min_pairs: int = 64,
    warmup: int = 1,
) -> dict[str, Any]:
    """:func:`measure_group` for one backend (``rampart bench contradiction``)."""
    return measure_group(
        {"one": score},
        batch=batch,
        tokens=tokens,
        concurrency=concurrency,
        min_pairs=min_pairs,
        warmup=warmup,
        rounds=1,
    )["one"]


def run_rerank_bench(
    backends: dict[str, ScoreFn],
    *,
    batches: Sequence[int] = (1, 8, 32),
    tokens: int = 256,
    concurrency: Mapping[str, Sequence[int]] | None = None,
    min_pairs: int = 64,
    progress: Callable[[str, int, int], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per (backend, batch, concurrency); backends sharing a (batch, concurrency) take turns
    (:func:`measure_group`), so their ratio is taken under the same machine conditions."""
    conc = concurrency or {}
    groups: dict[tuple[int, int], list[str]] = {}
    for b in batches:
        for name in backends:
            for c in conc.get(name, (1,)):
                groups.setdefault((b, c), []).append(name)
    found: dict[tuple[str, int, int], dict[str, Any]] = {}
    for i, ((b, c), names) in enumerate(groups.items(), start=1):
        figures = measure_group(
            {n: backends[n] for n in names}, batch=b, tokens=tokens, concurrency=c, min_pairs=min_pairs
        )
        for name, row in figures.items():
            found[(name, b, c)] = row
        if progress:
            progress("bench rerank", i, len(groups))
    return [
        {"backend": name, "batch": b, "concurrency": c, **found[(name, b, c)]}
        for name in backends
        for b in batches
        for c in conc.get(name, (1,))
    ]


def ratios(rows: list[dict[str, Any]], remote: str, local: str) -> list[dict[str, Any]]:
    """Remote/in-process throughput at equal batch and concurrency: ``ratio`` over the whole run and
    ``paired_ratio``, the median of the rounds' ratios (each round's two backends ran back to back, so a
    slow minute of the machine falls on both sides of one round's ratio, not on one backend's total)."""
    index = {(r["backend"], r["batch"], r["concurrency"]): r for r in rows}
    out = []
    for (name, b, c), r in index.items():
        base = index.get((local, b, c))
        if name == remote and base:
            # the two rows come from one measure_group call: one figure per round each
            pairs = zip(r["round_pairs_per_s"], base["round_pairs_per_s"], strict=True)
            per_round = [x / y for x, y in pairs if y > 0]
            out.append(
                {
                    "batch": b,
                    "concurrency": c,
                    "ratio": round(r["pairs_per_s"] / base["pairs_per_s"], 3),
                    "paired_ratio": round(statistics.median(per_round), 3) if per_round else None,
                }
            )
    return out


def bench_served_backends(
    settings: RampartSettings,
    *,
    batches: Sequence[int],
    tokens: int,
    min_pairs: int,
    torch_model: Path | None = None,
    triton: bool = True,
    triton_instances: int | None = None,
    threads: int,
    parallel: int,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(manifest, rows)`` of ``rampart bench rerank``: the installed reranker's ONNX variants
    in-process (``onnx-<variant>``), the PyTorch model of ``torch_model`` if given, and (``triton``) the
    served variant in a local tritonserver started here and stopped after. In-process and Triton run
    the same scoring code with the same ``threads``/``parallel`` layout, so their ratio compares the
    serving paths; the served variant and Triton are also timed at concurrency 16."""
    import tempfile

    from services.common.net import free_port
    from services.rerank.config import TritonSettings
    from services.rerank.onnx_reranker import OnnxReranker, load_manifest
    from services.rerank.triton_repository import materialize
    from services.rerank.triton_reranker import TritonReranker
    from services.rerank.triton_server import TritonServer

    model_dir = settings.reranker_model_dir()
    manifest = load_manifest(model_dir)
    backends: dict[str, ScoreFn] = {}
    if torch_model is not None:
        backends["torch-fp32"] = torch_scorer(torch_model, tokens)
    for variant in ("fp32", "int8"):
        if variant in manifest["variants"]:
            backends[f"onnx-{variant}"] = OnnxReranker.from_dir(
                model_dir, variant=variant, max_length=tokens, threads=threads, parallel=parallel
            ).score
    concurrency: dict[str, tuple[int, ...]] = {name: (1,) for name in backends}
    concurrency[f"onnx-{settings.rerank.variant}"] = (1, 16)
    with tempfile.TemporaryDirectory(prefix="rampart-bench-") as tmp:
        server = None
        if triton:
            repo = materialize(
                model_dir,
                Path(tmp) / "repo",
                variant=settings.rerank.variant,
                max_length=tokens,
                instances=triton_instances,
                threads=threads,
                parallel=parallel,
            )
            server = TritonServer(
                venv=settings.rerank.triton.venv,
                repository=repo,
                work_dir=Path(tmp) / "triton",
                grpc_port=free_port(),
                http_port=free_port(),
                metrics_port=free_port(),
            ).start()
        try:
            if server is not None:
                cfg = TritonSettings(url=server.grpc_url, deadline_ms=120_000, batch_size=max(batches))
                backends["triton"] = TritonReranker.connect(cfg).score
                concurrency["triton"] = (1, 16)
            rows = run_rerank_bench(
                backends,
                batches=batches,
                tokens=tokens,
                concurrency=concurrency,
                min_pairs=min_pairs,
                progress=progress,
            )
        finally:
            if server is not None:
                server.stop()
    return manifest, rows
