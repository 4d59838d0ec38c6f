"""Settings, read once at start-up from ``RAMPART_*`` environment variables (nested with ``__``).

Example: ``RAMPART_INDEX__BM25_K1=0.9`` or ``RAMPART_FUSION__METHOD=rrf``. Build one
:class:`RampartSettings` in the entry point and pass it down; nothing reads the environment at import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from services.common.types import FusionMethod


class EmbeddingSettings(BaseModel):
    model_dir: Path | None = Field(
        default=None,
        description="Folder with model.onnx, tokenizer.json and manifest.json (from `rampart models build`); default <models_dir>/minilm-l6-v2",
    )
    batch_size: int = Field(default=32, ge=1, le=1024, description="Texts per onnxruntime call")
    max_length: int = Field(default=256, ge=16, le=512, description="Tokens per text (MiniLM: 256)")
    threads: int = Field(default=0, ge=0, description="onnxruntime intra-op threads; 0 = all cores")
    spin_wait: bool = Field(
        default=False,
        description="Let onnxruntime's threads busy-wait after a call for the next one. Off: a search embeds "
        "one query and moves on, and threads spinning on the cores would slow the stages after it (dense "
        "search, the reranker; docs/benchmarks.md); on only helps a process that embeds back to back",
    )


class ChunkingSettings(BaseModel):
    method: Literal["topic", "fixed"] = Field(
        default="topic", description="topic: boundaries from embedding similarity; fixed: word windows"
    )
    min_words: int = Field(default=40, ge=1, description="Smallest chunk a topic cut may leave")
    max_words: int = Field(default=220, ge=8, description="Largest chunk (MiniLM reads ~190 words)")
    window_sentences: int = Field(
        default=2, ge=1, le=10, description="Sentences each side of a gap compared for a topic shift"
    )
    # A boundary is a similarity valley deeper than mean - depth_std * std (TextTiling's cut-off).
    depth_std: float = Field(default=0.5, description="Valley cut-off: depth > mean - depth_std*std")
    fixed_overlap_words: int = Field(default=30, ge=0, description="Overlap of fixed windows")
    header_terms: int = Field(default=5, ge=0, le=20, description="Salient terms in each chunk header")

    @model_validator(mode="after")
    def _bounds(self) -> ChunkingSettings:
        if self.min_words > self.max_words:
            raise ValueError(
                f"chunking.min_words={self.min_words} exceeds max_words={self.max_words}; lower min_words"
            )
        return self


class IndexSettings(BaseModel):
    bm25_k1: float = Field(default=1.2, ge=0.0, le=10.0, description="BM25 term-frequency saturation")
    bm25_b: float = Field(default=0.75, ge=0.0, le=1.0, description="BM25 length normalisation")
    vector_kind: Literal["flat", "hnsw"] = Field(
        default="flat", description="flat: exact search; hnsw: approximate, for millions of chunks"
    )
    hnsw_m: int = Field(default=32, ge=4, le=128, description="HNSW graph degree")
    hnsw_ef_search: int = Field(default=128, ge=8, le=4096, description="HNSW search breadth")
    writer_heap_mb: int = Field(default=128, ge=16, le=4096, description="tantivy writer memory")
    claim_vectors: bool = Field(
        default=True,
        description="Embed each chunk's text without its header too (a second embedding per chunk at "
        "ingest): the fact-check's planted-copies signal compares these (docs/factcheck.md)",
    )


MAX_LINK_SEEDS = 20  # fused results whose named pages may join the head (FusionSettings.link_seeds)
MAX_BACKLINKS = 10  # pages naming the seeds that may join the head (FusionSettings.backlinks)


class FusionSettings(BaseModel):
    method: FusionMethod = Field(default=FusionMethod.MINMAX, description="minmax, zscore or rrf")
    # 0.5 / 0.5: the SciFact *train* sweep (docs/benchmarks.md) found no split significantly better
    # (best, 0.4/0.6: +0.005 nDCG@10, p = 0.06), so the conventional equal weights stay.
    bm25_weight: float = Field(default=0.5, ge=0.0, le=1.0, description="Weight of BM25 in fusion")
    dense_weight: float = Field(default=0.5, ge=0.0, le=1.0, description="Weight of dense in fusion")
    rrf_k: int = Field(default=60, ge=1, description="RRF constant k")
    # 300, what the evaluation's single-shot and chain pipelines always used: a chunk ranked 150th by one
    # retriever and 20th by the other keeps both scores. +3-5 ms per search over 100 (docs/benchmarks.md).
    candidates: int = Field(default=300, ge=1, le=2000, description="Per-retriever candidates before fusion")
    fill_missing: bool = Field(
        default=True,
        description="Score a chunk found by only one retriever with the other one too (see docs/fusion.md)",
    )
    # 3: on the HotpotQA-500 train half, routed all_supporting@5/@10 0.919/0.945 -> 0.930/0.952 and
    # chain:1 0.934/0.963 -> 0.941/0.978 (5 seeds: the same within a question); docs/retrieval.md.
    link_seeds: int = Field(
        default=3,
        ge=0,
        le=MAX_LINK_SEEDS,
        description="Pages the top N fused results name by title join the reranked head (0 = off)",
    )
    # 2: chosen on the HotpotQA-500 train half (docs/retrieval.md, "Pages that name the top results").
    backlinks: int = Field(
        default=2,
        ge=0,
        le=MAX_BACKLINKS,
        description="With link_seeds, at most this many pages that name those results by title (the best "
        "for the query by BM25) join the reranked head after the named ones (0 = off)",
    )


class TritonSettings(BaseModel):
    url: str = Field(default="127.0.0.1:8001", description="Triton gRPC endpoint host:port")
    model_name: str = Field(default="rampart_reranker", description="Model name in the Triton repository")
    model_version: str = Field(
        default="1", description="Pinned model version ('' = server's latest; pin it in production)"
    )
    deadline_ms: int = Field(default=2000, ge=10, description="Per-call deadline; past it, rerank degrades")
    retries: int = Field(default=2, ge=0, le=10, description="Retries on UNAVAILABLE only (backoff)")
    batch_size: int = Field(default=32, ge=1, le=1024, description="Pairs per inference request")
    venv: Path = Field(
        default=Path(".venv-triton"),
        description="Virtualenv holding nvidia-pytriton's tritonserver (numpy<2); `make triton` builds it",
    )


class RerankSettings(BaseModel):
    # On by default: blended with the first stage and with the two-hop lift, the shipped model adds
    # +0.041 nDCG@10 on SciFact test and +0.043 on HotpotQA held-out (both p < 0.001; docs/benchmarks.md)
    # for ~0.3 s per query on two CPU cores; latency-bound deployments turn it off here or per request.
    enabled: bool = Field(
        default=True,
        description="Rerank every search unless the request says otherwise (see docs/reranking.md)",
    )
    backend: Literal["onnx", "triton", "none"] = Field(
        default="onnx", description="onnx: in-process; triton: remote server; none: fused order only"
    )
    model_dir: Path | None = Field(
        default=None,
        description="Exported cross-encoder (manifest.json, tokenizer.json, model*.onnx); default <models_dir>/reranker",
    )
    variant: Literal["int8", "fp32"] = Field(
        default="int8", description="int8: ~1.8x faster on CPU, ranks like fp32; fp32 for GPU/exactness"
    )
    depth: int = Field(
        default=30, ge=1, le=1000, description="Fused candidates reranked (CPU: 20-30; GPU: 100)"
    )
    mode: Literal["auto", "residual", "fused", "pure"] = Field(
        default="auto",
        description="residual: logit + w*first-stage (w learned in training); fused: weight*minmax(logit) + "
        "(1-weight)*minmax(first-stage); pure: rerank order only; auto: residual if the model has w, else fused",
    )
    weight: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Weight of the reranker score in fused mode"
    )
    # 0.8: the middle of the plateau (0.7-0.9) on the HotpotQA-500 train half (docs/reranking.md)
    link_weight: float = Field(
        default=0.8,
        ge=0.0,
        le=1.0,
        description="Two-hop lift: a candidate linked by title to one of the two best reranked pages rises "
        "this share of the way from the head's lowest score to that page's (0 = off; docs/reranking.md)",
    )
    max_length: int | None = Field(
        default=None, ge=16, le=512, description="Tokens per (query, chunk) pair; default: the model's own"
    )
    batch_size: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="Pairs per onnxruntime call. 1 keeps int8 scores independent of batch company (dynamic "
        "int8 quantises activations per batch, padding included) at no CPU cost (measured); raise for fp32/GPU",
    )
    threads: int = Field(
        default=1,
        ge=0,
        description="onnxruntime threads per call; 0 = all cores in one call. 1 with `parallel` 0 runs one "
        "single-thread call per core side by side: steadier on CPU than one call on all cores (measured)",
    )
    parallel: int = Field(
        default=0,
        ge=0,
        le=64,
        description="onnxruntime calls at once per process; 0 = as many `threads`-thread calls as the cores "
        "hold (1 when threads is 0); always 1 on a GPU",
    )
    cache_size: int = Field(
        default=50_000, ge=0, description="Cached scores by (model, query, chunk); 0 = off"
    )
    triton: TritonSettings = TritonSettings()


class CelerySettings(BaseModel):
    broker_url: str = Field(
        default="redis://127.0.0.1:6379/0", description="Celery broker (Redis); credentials via the URL"
    )
    result_backend: str = Field(default="redis://127.0.0.1:6379/1", description="Celery result backend")
    queue: str = Field(default="rampart.factcheck", description="Queue the fact-check workers consume")
    concurrency: int = Field(default=2, ge=1, le=256, description="Worker processes per worker node")
    cache_ttl_s: int = Field(
        default=24 * 3600, ge=0, description="Evidence cached in Redis by (model, query, passage); 0 = off"
    )
    retries: int = Field(default=2, ge=0, le=10, description="Retries of a task on transient errors only")
    cache_url: str | None = Field(
        default=None,
        description="Redis holding cached evidence (redis:// or rediss://); default: result_backend",
    )
    result_expires_s: int = Field(
        default=120,
        ge=1,
        description="Uncollected task results (a check past its deadline) expire after this",
    )
    visibility_timeout_s: int = Field(
        default=300,
        ge=10,
        description="A task reserved by a worker node that vanished is redelivered after this (tasks take ms)",
    )
    socket_timeout_s: float = Field(
        default=2.0, gt=0.0, le=60.0, description="Connect/read timeout of every Redis call the checker makes"
    )
    ready_timeout_s: float = Field(
        default=1.0, gt=0.0, le=30.0, description="How long /readyz waits for a worker to answer"
    )
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="`rampart worker` serves /metrics (task counts and latency of all its processes) "
        "here; needs PROMETHEUS_MULTIPROC_DIR set to an empty directory; 0 disables",
    )
    metrics_host: str = Field(default="127.0.0.1", description="Bind address of the worker's /metrics")
    items_per_task: int = Field(
        default=15,
        ge=1,
        le=100,
        description="Passages per fact-check task (a check's cache misses go out as ceil(n / this) "
        "tasks of near-equal size). Larger: fewer Redis round trips and one embedding batch per "
        "task; smaller: a check spreads over more worker processes. Aim for n / (worker processes), "
        "n = passages per check (max(depth, context_depth)): 15 = 30 over the default 2 processes; "
        "1 = one task per passage",
    )


class FactCheckSettings(BaseModel):
    """Thresholds are tuned on dev data only: `rampart tune factcheck` on PoisonedRAG's NQ attacks in
    the NQ-open oracle passages + the train half of HotpotQA-500 (docs/factcheck.md, benchmarks.md)."""

    enabled: bool = Field(default=True, description="Judge the top results of every search")
    backend: Literal["inprocess", "celery", "none"] = Field(
        default="inprocess", description="inprocess: thread pool; celery: Redis-backed workers"
    )
    depth: int = Field(default=10, ge=1, le=100, description="Top-M results judged (HAC: M = 5)")
    context_depth: int = Field(
        default=30,
        ge=0,
        le=100,
        description="Results down to this rank are read (not judged) as peers for the near-duplicate "
        "clusters: planted paraphrases ranked below the top-M still vouch for each other; <= depth = off",
    )
    min_keep: int = Field(
        default=2,
        ge=0,
        le=100,
        description="If fewer RELEVANT survive, fall back to the judged non-adversarial top-M, flagged",
    )
    deadline_ms: int = Field(
        default=3000, ge=10, description="Past it, results pass unverified with 'factcheck' in degraded"
    )
    workers: int = Field(default=4, ge=1, le=64, description="In-process thread pool size")
    injection_threshold: float = Field(
        default=1.0, ge=0.0, le=1.0, description="Prompt-injection score that makes a passage ADVERSARIAL"
    )
    query_copy_threshold: float = Field(
        default=0.8, ge=0.0, le=1.0, description="Share of the query copied verbatim that is ADVERSARIAL"
    )
    stuffing_threshold: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Keyword-stuffing score that is ADVERSARIAL"
    )
    framing: bool = Field(
        default=True,
        description="A passage that frames its claim as contrary to fact ('In an alternate universe, ...', "
        "'Contrary to popular belief, ...') is COUNTERFACTUAL (detectors/framing.py)",
    )
    duplicate_threshold: float = Field(
        default=0.84,
        ge=0.0,
        le=1.0,
        description="Embedding cosine within which passages of different documents are near-duplicates "
        "(the DBSCAN radius of the cluster detector)",
    )
    duplicate_min_docs: int = Field(
        default=5, ge=2, le=50, description="Documents in a near-duplicate cluster that make it ADVERSARIAL"
    )
    copy_threshold: float = Field(
        default=0.8,
        ge=0.0,
        le=1.0,
        description="Claim-vector cosine (chunk text without its header) at which another document's "
        "chunk is a near-copy (the planted-copies detector; needs index.claim_vectors)",
    )
    copy_min_docs: int = Field(
        default=2,
        ge=0,
        le=8,
        description="Other documents with a near-copy that make a passage ADVERSARIAL; 0 = off "
        "(raise it for corpora full of mirrored or templated pages)",
    )
    copy_subjects: bool = Field(
        default=True,
        description="A near-copy that opens with a name neither the passage nor the query uses (a template "
        "family: '2011 Colorado Buffaloes football team' beside the 2009 page) does not count toward "
        "copy_min_docs (services/common/subjects.py)",
    )
    copy_border_threshold: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Claim-vector cosine within which a passage joins a planted group through a member "
        "that has copy_min_docs near-copies itself (DBSCAN's border members; the search fetches those "
        "members' copies too); 0 = off",
    )
    copy_border_slack: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="How far below the core member's own copy_min_docs-th near-copy cosine a border "
        "member may lie (a genuine paragraph on the planted subject lies farther out than the "
        "planted siblings); 1 = no such condition",
    )
    claim_join_threshold: float = Field(
        default=0.55,
        ge=0.0,
        le=1.0,
        description="Embedding cosine within which a passage not yet judged is compared with the "
        "passages flagged as planted copies or a near-duplicate cluster in the same check: close to "
        "claim_min_group of them and using every word they share beyond the query's (their claim), it "
        "joins them as ADVERSARIAL; 0 = off",
    )
    claim_min_group: int = Field(
        default=2,
        ge=1,
        le=8,
        description="Flagged passages within claim_join_threshold whose shared claim a passage must repeat",
    )
    claim_group_coverage: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Query-term coverage (best sentence strip) a flagged passage needs to count in the "
        "group whose claim others may join: planted text is written for the query",
    )
    claim_share: float = Field(
        default=0.5,
        gt=0.0,
        le=1.0,
        description="Share of the words a planted group shares beyond the query (its claim) a passage must "
        "use to join it by claim: 1 = every one",
    )
    claim_max_words: int = Field(
        default=6,
        ge=0,
        le=100,
        description="A passage using only claim_share of a planted group's shared words joins it only when "
        "they are at most this many (a claim is an answer and a few words; a longer shared vocabulary is "
        "a template or a subject); 0 = any number",
    )
    claim_length_ratio: float = Field(
        default=1.5,
        ge=0.0,
        le=100.0,
        description="A passage joins a planted group by its claim only when it is at most this many times "
        "as long as the group's longest member (written like them, not a long page that mentions the "
        "same name); 0 = any length",
    )
    untrusted_sources: list[str] = Field(
        default_factory=list, description="Glob patterns over a chunk's source marking it untrusted"
    )
    untrusted_factor: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Untrusted passages face content thresholds times this"
    )
    relevance_threshold: float = Field(
        default=0.02,
        ge=0.0,
        le=1.0,
        description="Calibrated P(relevant) from the reranker logit below which a passage may be IRRELEVANT",
    )
    calibration: tuple[float, float] = Field(
        default=(0.9991, -2.4084), description="Platt scaling (a, b): P(relevant) = sigmoid(a * logit + b)"
    )
    coverage_threshold: float = Field(
        default=0.34,
        ge=0.0,
        le=1.0,
        description="Best strip's share of the query terms below which no strip addresses the query",
    )
    conflict_threshold: float = Field(
        default=0.8, ge=0.0, le=1.0, description="Claim-conflict score between two passages that counts"
    )
    contradiction_threshold: float = Field(
        default=0.9,
        ge=0.0,
        le=1.0,
        description="The contradiction classifier's P(CONTRADICT) between two passages that counts as a conflict",
    )
    title_links: bool = Field(
        default=True,
        description="Read document titles that passages spell out: a passage a relevant one names by "
        "title (or that names a relevant one's title and holds a query term that one lacks) is a "
        "bridge, not IRRELEVANT; two passages each about its own titled subject (neither names the "
        "other) are never compared for conflicts nor count as a near-duplicate cluster (docs/factcheck.md)",
    )
    contradiction_pairs: int = Field(
        default=0,
        ge=0,
        le=200,
        description="Most similar passage pairs per check read by the contradiction classifier (2 model "
        "calls each); 0 = claim alignment only (the default: on the dev attack sets the classifier changed "
        "no outcome and cost ~0.4 s per check at 12 pairs, docs/benchmarks.md)",
    )
    use_llm: bool = Field(
        default=True,
        description="Judge each passage with the LLM at llm.base_url when one is set (detectors keep "
        "precedence for ADVERSARIAL; see docs/factcheck.md)",
    )
    use_contradiction_model: bool = Field(
        default=True,
        description="Load the trained claim/evidence contradiction classifier (SUPPORT / CONTRADICT / NEI, "
        "`rampart train contradiction`; see docs/factcheck.md)",
    )
    contradiction_model_dir: Path | None = Field(
        default=None,
        description="Exported contradiction classifier (manifest.json, tokenizer.json, model.int8.onnx); "
        "default <models_dir>/contradiction",
    )
    celery: CelerySettings = CelerySettings()


class LlmSettings(BaseModel):
    """An OpenAI-compatible chat endpoint (llama.cpp server, vLLM, a hosted API); shared by the stages
    that ask a model (the fact-check judge now, answers later)."""

    base_url: str | None = Field(
        default=None,
        description="OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1; unset = no LLM",
    )
    model: str = Field(default="default", description="Model name sent with every request")
    api_key: SecretStr | None = Field(
        default=None, description="Sent as 'Authorization: Bearer ...' when set; never logged"
    )
    timeout_s: float = Field(
        default=10, gt=0.0, le=600.0, description="Per-request timeout; past it the call counts as no answer"
    )
    max_tokens: int = Field(default=96, ge=8, le=4096, description="Longest reply asked of the model")
    retries: int = Field(
        default=1, ge=0, le=10, description="Retries on connection errors and HTTP 5xx/429 only"
    )

    @model_validator(mode="after")
    def _url(self) -> LlmSettings:
        if self.base_url is not None:
            parts = urlsplit(self.base_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                shown = "<url with credentials>" if parts.password else repr(self.base_url)
                raise ValueError(
                    f"llm.base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {shown}; "
                    "fix RAMPART_LLM__BASE_URL (or unset it to run without an LLM)"
                )
        return self


class RoutePlan(BaseModel):
    """Retrieval parameters of one complexity level (HyPA's table, papers.md §2)."""

    context_k: int = Field(ge=1, le=100, description="Results handed to the answer (HyPA's top-k)")
    candidates: int = Field(default=300, ge=1, le=2000, description="Per-retriever depth before fusion")
    bm25_weight: float = Field(ge=0.0, le=1.0, description="BM25's fusion weight")
    dense_weight: float = Field(ge=0.0, le=1.0, description="Dense retrieval's fusion weight")
    kg_weight: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Knowledge graph's weight; no KG is indexed yet, so it is renormalised away",
    )
    kg_depth: int = Field(default=1, ge=0, le=5, description="KG expansion hops (used once a KG exists)")
    chain_steps: int | None = Field(
        default=None,
        ge=1,
        le=10,
        description="Retrieval steps at most for a Complex query of this complexity; unset = chain.max_steps",
    )

    @model_validator(mode="after")
    def _sum(self) -> RoutePlan:
        total = self.bm25_weight + self.dense_weight + self.kg_weight
        if abs(total - 1.0) > 1e-6:
            raise ValueError(
                f"route plan weights bm25={self.bm25_weight} dense={self.dense_weight} kg={self.kg_weight} "
                f"sum to {total:.3f}; they must sum to 1"
            )
        return self


def _hypa_plans() -> dict[str, RoutePlan]:
    return {
        "low": RoutePlan(context_k=3, bm25_weight=0.5, dense_weight=0.4, kg_weight=0.1, kg_depth=1),
        # Medium = two-entity questions (comparisons): the question names both, so one hop after the
        # first search is all a chain needs. On the HotpotQA-500 train half, 2 steps against 5 gave
        # all_supporting@2 0.831 vs 0.809 at 1.62 vs 1.81 calls (docs/chain.md).
        "medium": RoutePlan(
            context_k=5, bm25_weight=0.4, dense_weight=0.4, kg_weight=0.2, kg_depth=2, chain_steps=2
        ),
        # High = multi-step questions, searched by the chain. HyPA tunes each row's weights on dev
        # data; this row's BM25:dense split was tuned on the routed pipeline's all_supporting (HotpotQA
        # train half; grid in docs/routing.md), because step 1's ranking seeds the chain's links and
        # stops. The KG's 0.3 share is 0 until a KG retriever exists; retune with one.
        "high": RoutePlan(context_k=10, bm25_weight=0.7, dense_weight=0.3, kg_weight=0.0, kg_depth=3),
    }


class RoutingSettings(BaseModel):
    """AdaptiveRAG routing + HyPA parameters (docs/orchestration.md)."""

    enabled: bool = Field(default=True, description="Classify each query and follow its route")
    model_dir: Path | None = Field(
        default=None,
        description="Trained query router (`rampart train router`); default <models_dir>/router",
    )
    min_confidence: float = Field(
        default=0.6, ge=0.0, le=1.0, description="Below this type confidence, route as Conversational"
    )
    plans: dict[str, RoutePlan] = Field(
        default_factory=_hypa_plans,
        description=(
            "Retrieval parameters per complexity (low/medium/high); HyPA's table by default, the high "
            "row's BM25:dense split tuned on the HotpotQA-500 train half (0.7:0.3)"
        ),
    )

    @model_validator(mode="after")
    def _levels(self) -> RoutingSettings:
        missing = {"low", "medium", "high"} - set(self.plans)
        if missing:
            raise ValueError(f"routing.plans lacks {sorted(missing)}; give low, medium and high")
        return self


class ChainSettings(BaseModel):
    """Chain-of-retrieval for Complex queries (CoRAG, papers.md §5)."""

    # B = 1, not CoRAG's 4: on HotpotQA-500 held-out B = 4 cost 4.96 retrieval calls per query against
    # 2.14 and did not beat B = 1 at all_supporting@2 (0.623 vs 0.654; docs/chain.md). B = 1 is the
    # only width that keeps a mixed query set near 1.5x the single-shot calls. 4 is one setting away.
    beam_width: int = Field(default=1, ge=1, le=16, description="Beams kept per step (B; CoRAG uses 4)")
    max_steps: int = Field(default=5, ge=1, le=10, description="Retrieval steps at most, the first included")
    stop_score: float = Field(
        default=0.9, ge=0.0, le=1.0, description="Stop once the best chain scores above this"
    )
    hop_k: int = Field(default=3, ge=1, le=20, description="Results each sub-query contributes (CoRAG: 3)")
    # Chosen on the HotpotQA-500 train half (docs/chain.md): 0.5-0.7 kept all_supporting@2 and @5 and
    # saved 0.07-0.16 calls per complex query; 0.3-0.4 stopped chains that needed their hop.
    apart_ratio: float | None = Field(
        default=0.6,
        gt=0.0,
        le=1.0,
        description=(
            "Stop after the first search when its 2nd result leads the 3rd by at least this share of the "
            "1st-to-5th score spread (the top two stand apart); unset = never"
        ),
    )
    # Checked on the HotpotQA-500 train half only (docs/chain.md): 0.15 and 0.5 gave lower
    # all_supporting@2 than 0.3 at B = 1.
    relevance_weight: float = Field(
        default=0.3,
        ge=0.0,
        le=1.0,
        description="Chain score = (1-w)*question-term coverage + w*mean lead relevance (docs/chain.md)",
    )
    use_llm: bool = Field(
        default=True, description="Propose sub-queries with the LLM at llm.base_url when one is set"
    )
    # Set by hand so that spans from a weakly matching sentence get no call; on the HotpotQA-500 train
    # half it holds B = 1 at ~1.9 calls per query (docs/chain.md). Not swept.
    min_prior: float = Field(
        default=0.4,
        ge=0.0,
        le=1.0,
        description="A sub-query gets a retrieval call only if its proposer prior reaches this",
    )
    # HotpotQA-500 held-out half, routed: all_supporting@2/@5 0.781/0.908 -> 0.842/0.939 with it
    # (docs/chain.md, "Evidence pairs"; the weights were fitted on the train half only).
    pair_order: bool = Field(
        default=True,
        description="Complex questions: put the pair of verified results most likely to answer together "
        "first (a learned pair model over the top chain.pair_depth documents; docs/chain.md)",
    )
    # Chosen on the HotpotQA train half with a cross-fitted reranker (docs/chain.md, "Evidence pairs"):
    # 10 -> 20 gave all_supporting@2/@5/@10 ~0.805/0.906/0.919 -> ~0.814/0.914/0.934 (pair model, CV).
    pair_depth: int = Field(
        default=20,
        ge=3,
        le=30,
        description="Verified documents whose pairs the pair model scores; the fact-check judges at least "
        "this many results of a Complex question",
    )
    # Chosen on the HotpotQA train half with every question forced Simple/low (out-of-fold pair models),
    # NQ-open dev and SciFact train (docs/chain.md, "Two-hop questions read as single-fact"): 2 lifts the
    # first's all_supporting@5 0.816 -> 0.927, NQ 0.980 -> 0.979, SciFact 0.828 -> 0.827 (offline: 1 gave
    # 0.904 on the first, 3 cost NQ).
    low_pair_promote: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Routes of low complexity: documents the pair model moves to just behind the "
        "reranker's top two (a two-hop question the router misreads still gets its bridge page); 0 = none",
    )
    pair_model_dir: Path | None = Field(
        default=None,
        description="Folder with the pair model's weights.json (`rampart train pairs`); unset = the "
        "shipped one",
    )


class SecondarySourceSettings(BaseModel):
    """Where CRAG's corrective search goes when the primary retrieval is graded Incorrect."""

    kind: Literal["none", "tenant", "http"] = Field(
        default="none",
        description="none: no fallback; tenant: another tenant's corpus in this index; http: a federated "
        "search endpoint",
    )
    tenant: str | None = Field(default=None, description="Corpus tenant searched when kind=tenant")
    url: str | None = Field(default=None, description="Search endpoint when kind=http")
    api_key: SecretStr | None = Field(default=None, description="Bearer token for kind=http; never logged")
    timeout_ms: int = Field(default=2000, ge=10, le=60_000, description="Past it, primary results only")
    top_k: int = Field(default=5, ge=1, le=50, description="Results asked of the secondary source")
    retries: int = Field(
        default=1, ge=0, le=5, description="kind=http: retries on connection errors and HTTP 5xx only"
    )
    max_text_chars: int = Field(
        default=4000, ge=100, le=100_000, description="kind=http: longer result texts are cut to this"
    )


class GradingSettings(BaseModel):
    """CRAG's retrieval evaluator and corrective actions (papers.md §3)."""

    enabled: bool = Field(default=True, description="Grade each retrieved set and act on the grade")
    # Evaluator and thresholds: `rampart tune grading --queries 150` (fit half of HotpotQA-500 train
    # half + SciFact train + NQ-oracle train queries; ≥ 0.9 precision for Correct and for Incorrect).
    correct_threshold: float = Field(
        default=0.78, ge=0.0, le=1.0, description="Score at or above: Correct (tuned on dev data, CRAG: 0.7)"
    )
    incorrect_threshold: float = Field(
        default=0.45, ge=0.0, le=1.0, description="Score below: Incorrect (tuned on dev data, CRAG: 0.5)"
    )
    depth: int = Field(default=5, ge=1, le=50, description="Top results the evaluator reads")
    # Off: on the HotpotQA-500 train half the re-search changed no figure at @<=10 (its hits rank
    # after the primary ones) and cost 0.07 calls per query (docs/benchmarks.md).
    research_primary: bool = Field(
        default=False,
        description="Incorrect with no secondary source: search the primary corpus once more with the "
        "rewritten query (one more retrieval call)",
    )
    weights: dict[str, float] = Field(
        default_factory=lambda: {
            "p_max": 7.2681,
            "p_mean": -1.7951,
            "coverage": 2.3686,
            "agreement": 0.2625,
            "dense_max": -1.8906,
        },
        description="Logistic evaluator: feature -> weight (features in docs/grading.md; "
        "fitted by `rampart tune grading` on dev data)",
    )
    bias: float = Field(
        default=-3.5398, description="Logistic evaluator's intercept (fitted with the weights on dev data)"
    )
    # Refinement defaults: chosen with `rampart tune refinement` and variants on HotpotQA-500 train-half
    # queries (answer-string recall vs characters kept; docs/grading.md)
    strips: int = Field(
        default=8,
        ge=1,
        le=50,
        description="Refinement: strips kept in all (each passage's best and opening strips are kept anyway)",
    )
    strip_chars: int = Field(
        default=2000, ge=100, le=20_000, description="Refinement: most characters of strips kept"
    )
    min_strip_score: float = Field(
        default=0.2, ge=0.0, le=1.0, description="Refinement: other strips scoring below are not added"
    )
    lexical_weight: float = Field(
        default=0.5, ge=0.0, le=1.0, description="Refinement: weight of term coverage vs. embedding cosine"
    )
    secondary: SecondarySourceSettings = SecondarySourceSettings()

    @model_validator(mode="after")
    def _order(self) -> GradingSettings:
        if self.incorrect_threshold > self.correct_threshold:
            raise ValueError(
                f"grading.incorrect_threshold={self.incorrect_threshold} exceeds "
                f"correct_threshold={self.correct_threshold}; lower it"
            )
        return self


class SessionSettings(BaseModel):
    """Conversation sessions and their fact graph (AdaptiveRAG, papers.md §4)."""

    backend: Literal["memory", "redis"] = Field(
        default="memory", description="memory: this process (embedded); redis: shared (distributed)"
    )
    redis_url: str = Field(default="redis://127.0.0.1:6379/2", description="Session store when backend=redis")
    ttl_s: int = Field(
        default=1800, ge=1, le=7 * 24 * 3600, description="A session expires this long after its last turn"
    )
    max_turns: int = Field(default=20, ge=1, le=200, description="Turns kept (older ones are dropped)")
    alpha: float = Field(
        default=0.6, ge=0.0, le=1.0, description="Fact relevance = alpha*similarity + (1-alpha)*proximity"
    )
    max_sessions: int = Field(
        default=10_000, ge=1, le=10_000_000, description="Sessions kept in memory (backend=memory)"
    )


class AnswerSettings(BaseModel):
    """``POST /v1/answer``: extractive by default, an LLM when ``llm.base_url`` is set."""

    use_llm: bool = Field(default=True, description="Generate with the LLM at llm.base_url when one is set")
    max_sentences: int = Field(default=3, ge=1, le=20, description="Sentences in an extractive answer")
    max_context_chars: int = Field(
        default=6000, ge=200, le=100_000, description="Verified context handed to the LLM, at most"
    )


class GatewaySettings(BaseModel):
    host: str = Field(default="127.0.0.1", description="Bind address (0.0.0.0 to expose)")
    port: int = Field(default=8080, ge=1, le=65535, description="HTTP port")
    api_keys_file: Path | None = Field(
        default=None, description="JSON file of hashed API keys; default <data_dir>/api-keys.json"
    )
    max_body_bytes: int = Field(default=20 * 1024 * 1024, ge=1024, description="Largest request body")
    max_document_bytes: int = Field(default=5 * 1024 * 1024, ge=1, description="Largest single document")
    max_batch_documents: int = Field(default=256, ge=1, description="Documents per ingest request")
    max_top_k: int = Field(default=100, ge=1, le=1000, description="Largest top_k a search may ask")
    max_query_chars: int = Field(default=2000, ge=1, description="Longest query")
    rate_limit_per_minute: int = Field(default=600, ge=0, description="Per API key; 0 disables")


class ServeSettings(BaseModel):
    """The orchestrator as a Ray Serve application (distributed mode; docs/ray-serve.md)."""

    ray_address: str | None = Field(
        default=None, description="Ray cluster to join (e.g. ray://head:10001); unset: start a local one"
    )
    app_name: str = Field(default="rampart-orchestrator", min_length=1, description="Serve application name")
    host: str = Field(default="127.0.0.1", description="Serve HTTP proxy bind address (0.0.0.0 to expose)")
    port: int = Field(
        default=8090, ge=1, le=65535, description="Serve HTTP proxy port (8000-8002: Triton; 8080: gateway)"
    )
    # Replicas ask Ray for 1 CPU by default: on a 2-core machine a third one would pend forever.
    pipeline_num_cpus: float = Field(
        default=0.5, gt=0.0, le=64.0, description="CPUs Ray reserves per pipeline replica (fractional)"
    )
    ingress_num_cpus: float = Field(
        default=0.25, gt=0.0, le=64.0, description="CPUs Ray reserves per ingress replica (fractional)"
    )
    pipeline_min_replicas: int = Field(default=1, ge=1, le=256, description="Autoscaling floor, pipeline")
    pipeline_max_replicas: int = Field(
        default=1,
        ge=1,
        le=256,
        description="Autoscaling ceiling, pipeline; >1 needs a shared index backend (the embedded one has "
        "one process)",
    )
    ingress_min_replicas: int = Field(default=1, ge=1, le=256, description="Autoscaling floor, ingress")
    ingress_max_replicas: int = Field(default=2, ge=1, le=256, description="Autoscaling ceiling, ingress")
    target_ongoing_requests: float = Field(
        default=2.0, gt=0.0, le=1000.0, description="Autoscaler's target of in-flight requests per replica"
    )
    max_ongoing_requests: int = Field(
        default=8, ge=1, le=10_000, description="In-flight requests per replica before callers queue"
    )
    health_check_period_s: float = Field(
        default=10.0, gt=0.0, le=3600.0, description="How often Serve calls check_health on each replica"
    )
    health_check_timeout_s: float = Field(
        default=30.0, gt=0.0, le=3600.0, description="A check_health slower than this marks it unhealthy"
    )
    graceful_shutdown_timeout_s: float = Field(
        default=20.0, ge=0.0, le=3600.0, description="Time a stopping replica gets to finish its requests"
    )
    object_store_mb: int = Field(
        default=128, ge=80, le=1_000_000, description="Object store of a local cluster (requests are small)"
    )
    ready_timeout_s: float = Field(
        default=180.0, gt=0.0, le=3600.0, description="How long start-up waits for the app to be RUNNING"
    )
    metrics_port: int = Field(
        default=9103,
        ge=0,
        le=65535,
        description="Prometheus /metrics of the pipeline replica (stage latencies, verdicts) on serve.host; "
        "0 disables; a second replica on the same host skips it (logged)",
    )

    @model_validator(mode="after")
    def _replica_bounds(self) -> ServeSettings:
        for name in ("pipeline", "ingress"):
            low, high = getattr(self, f"{name}_min_replicas"), getattr(self, f"{name}_max_replicas")
            if low > high:
                raise ValueError(
                    f"serve.{name}_min_replicas={low} exceeds {name}_max_replicas={high}; raise the maximum"
                )
        return self


class GrpcServerSettings(BaseModel):
    """One gRPC service's server (distributed mode; docs/grpc.md)."""

    host: str = Field(default="127.0.0.1", description="Bind address (0.0.0.0 to expose)")
    port: int = Field(default=50051, ge=1, le=65535, description="gRPC port")
    metrics_port: int = Field(
        default=9101, ge=0, le=65535, description="Prometheus /metrics port on the same host; 0 disables"
    )
    grace_s: float = Field(
        default=10.0, ge=0.0, le=600.0, description="On SIGTERM, time in-flight RPCs get to finish"
    )
    max_message_bytes: int = Field(
        default=32 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024, description="Largest request/response"
    )
    max_concurrent_rpcs: int = Field(
        default=64, ge=1, le=100_000, description="RPCs served at once before new ones are refused"
    )


class IngestServiceSettings(GrpcServerSettings):
    port: int = Field(default=50052, ge=1, le=65535, description="gRPC port")
    metrics_port: int = Field(
        default=9102, ge=0, le=65535, description="Prometheus /metrics port on the same host; 0 disables"
    )
    journal_dir: Path | None = Field(
        default=None,
        description="Accepted batches are written here before they are acknowledged; default "
        "<data_dir>/ingest-journal",
    )
    journal_max_batches: int = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description="Batches queued (journaled, not yet processed) before new ones are refused (RATE_LIMITED)",
    )
    journal_max_bytes: int = Field(
        default=512 * 1024 * 1024,
        ge=1024,
        description="Bytes of queued documents before new batches are refused (RATE_LIMITED)",
    )
    journal_keep_done_s: float = Field(
        default=3600.0,
        ge=0.0,
        le=30 * 24 * 3600.0,
        description="Processed batches (with their results) stay in the journal this long, then are pruned",
    )
    retry_max_s: float = Field(
        default=300.0,
        ge=0.0,
        le=24 * 3600.0,
        description="How long a batch is retried while the index is unreachable before its documents "
        "are reported failed",
    )
    test_process_delay_s: float = Field(
        default=0.0,
        ge=0.0,
        le=600.0,
        description="TESTS ONLY: wait this long before processing each batch (crash-after-ack tests); "
        "keep 0 in production",
    )


class RemoteSettings(BaseModel):
    """Where the distributed stages are: set an address and its callers use the gRPC service."""

    retrieval_address: str | None = Field(
        default=None, description="host:port of the retrieval service; unset: the local embedded index"
    )
    ingest_address: str | None = Field(
        default=None, description="host:port of the ingest service; unset: ingest in-process"
    )
    deadline_ms: int = Field(
        default=5000, ge=10, le=600_000, description="Deadline of one RPC (a caller's own deadline wins)"
    )
    ingest_deadline_ms: int = Field(
        default=300_000, ge=100, le=3_600_000, description="Deadline of one ingest batch RPC"
    )
    orchestrator_url: str | None = Field(
        default=None,
        description="Base URL of the orchestrator's Serve HTTP ingress (e.g. http://127.0.0.1:8090); set: "
        "the gateway forwards search/answer there instead of running the pipeline in-process",
    )
    internal_token: SecretStr | None = Field(
        default=None,
        description="Shared secret the gateway sends to the orchestrator ingress, which then refuses "
        "callers without it (the ingress trusts the principal in the body); `rampart stack` makes one",
    )
    orchestrator_timeout_s: float = Field(
        default=60.0, gt=0.0, le=3600.0, description="Longest the gateway waits for one orchestrator reply"
    )


class StackSettings(BaseModel):
    """``rampart stack``: every distributed service on 127.0.0.1 under supervisord (docs/stack.md)."""

    dir: Path | None = Field(
        default=None, description="supervisord config, socket, logs and pid; default <data_dir>/stack"
    )
    redis_port: int = Field(default=6390, ge=1, le=65535, description="redis-server port (broker, cache)")
    triton: bool = Field(
        default=True, description="Rerank on a tritonserver (needs `make triton`); false: onnx in-process"
    )
    triton_grpc_port: int = Field(default=8001, ge=1, le=65535, description="tritonserver gRPC port")
    triton_http_port: int = Field(default=8000, ge=1, le=65535, description="tritonserver HTTP port")
    triton_metrics_port: int = Field(default=8002, ge=1, le=65535, description="tritonserver metrics port")
    workers: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Celery fact-check worker processes (2: a check's two tasks run in parallel; "
        "factcheck.celery.items_per_task)",
    )
    ready_timeout_s: float = Field(
        default=300.0, gt=0.0, le=3600.0, description="How long `stack up` waits for every service"
    )
    worker_metrics_port: int = Field(
        default=9104, ge=1, le=65535, description="Prometheus /metrics of the fact-check workers"
    )


class RampartSettings(BaseSettings):
    """Everything configurable; see ``docs/configuration.md`` for each field."""

    model_config = SettingsConfigDict(env_prefix="RAMPART_", env_nested_delimiter="__", extra="ignore")

    data_dir: Path = Field(default=Path(".rampart/data"), description="Index, status DB, API keys")
    models_dir: Path = Field(default=Path(".rampart/models"), description="Built ONNX models")
    eval_data_dir: Path = Field(
        default=Path("../shared/data"),
        description="Benchmark data (read-only); `rampart eval NAME` looks for NAME here",
    )
    log_level: str = Field(default="INFO", description="DEBUG, INFO, WARNING, ERROR")
    log_format: Literal["json", "console"] = Field(default="console", description="json for log shippers")
    trace_content: bool = Field(
        default=False, description="Put query and passage text on trace spans (off: counts and ids only)"
    )
    key_pepper: SecretStr | None = Field(
        default=None, description="Optional secret mixed into API-key hashes (HMAC-SHA256)"
    )

    embedding: EmbeddingSettings = EmbeddingSettings()
    chunking: ChunkingSettings = ChunkingSettings()
    index: IndexSettings = IndexSettings()
    fusion: FusionSettings = FusionSettings()
    rerank: RerankSettings = RerankSettings()
    factcheck: FactCheckSettings = FactCheckSettings()
    gateway: GatewaySettings = GatewaySettings()
    llm: LlmSettings = LlmSettings()
    routing: RoutingSettings = RoutingSettings()
    chain: ChainSettings = ChainSettings()
    grading: GradingSettings = GradingSettings()
    sessions: SessionSettings = SessionSettings()
    answer: AnswerSettings = AnswerSettings()
    serve: ServeSettings = ServeSettings()
    retrieval_service: GrpcServerSettings = GrpcServerSettings()
    ingest_service: IngestServiceSettings = IngestServiceSettings()
    remote: RemoteSettings = RemoteSettings()
    stack: StackSettings = StackSettings()

    def embedding_model_dir(self) -> Path:
        return self.embedding.model_dir or self.models_dir / "minilm-l6-v2"

    def reranker_model_dir(self) -> Path:
        return self.rerank.model_dir or self.models_dir / "reranker"

    def contradiction_model_dir(self) -> Path:
        return self.factcheck.contradiction_model_dir or self.models_dir / "contradiction"

    def router_model_dir(self) -> Path:
        return self.routing.model_dir or self.models_dir / "router"

    def stack_dir(self) -> Path:
        return self.stack.dir or self.data_dir / "stack"

    def ingest_journal_dir(self) -> Path:
        return self.ingest_service.journal_dir or self.data_dir / "ingest-journal"

    def api_keys_path(self) -> Path:
        return self.gateway.api_keys_file or self.data_dir / "api-keys.json"
