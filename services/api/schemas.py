"""The public HTTP contract: the request and response models of ``/v1/*`` (the gateway's OpenAPI
document is generated from these).

The gateway validates requests and answers with them; the orchestrator (in-process or behind Ray
Serve's ingress) builds the responses (``services.orchestrator.serving.responses``). Both depend on
this module and neither on the other's internals, so it imports no serving code.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictFloat, field_validator
from pydantic.config import JsonDict
from pydantic_core import PydanticCustomError

from services.common.query_text import WORD_PATTERN
from services.common.types import (
    DEFAULT_TOP_K,
    METADATA_KEYS,
    SESSION_ID_PATTERN,
    WHOLE_NUMBER,
    Document,
    DocumentState,
    DocumentStatus,
    FusionMethod,
    MetadataValue,
    Name,
    SearchFilters,
    Strict,
    WholeInt,
    session_id_problem,
)
from services.common.verdicts import Verdict
from services.ingest.service import IngestResult
from services.retrieval.config import MAX_BACKLINKS, MAX_LINK_SEEDS
from services.retrieval.fusion import weights_json_schema, weights_problem
from services.retrieval.graph.config import MAX_GRAPH_DEPTH


class ErrorBody(BaseModel):
    code: str = Field(description="Stable machine-readable code, e.g. invalid_argument")
    message: str = Field(description="What is wrong and how to fix it")
    details: dict[str, object] = Field(default_factory=dict)


class DocumentIn(Document):
    tenant: Name | None = Field(  # type: ignore[assignment]
        default=None, description="Defaults to the caller's tenant; any other tenant is refused (403)."
    )
    source: str = Field(
        default="",
        max_length=2048,
        description="Where it came from (URL, path). A key bound to a source namespace (`rampart keys "
        "create --source`) may only send sources under it (else 403); omitted, the key's namespace is used.",
    )
    metadata: dict[str, MetadataValue] = Field(
        default_factory=dict,
        max_length=64,
        description="Free key-value metadata. The key 'trust' is refused (400): trust comes from the writing "
        "key (`rampart keys create --trust untrusted`), never from the request.",
        json_schema_extra={**METADATA_KEYS, "not": {"required": ["trust"]}},
    )


class DocumentStatusOut(BaseModel):
    """A document's ingest state as the API returns it (the stored ACL stays inside: the write ACL
    reads it, callers do not)."""

    id: str
    tenant: str
    version: int
    state: DocumentState
    chunks: int = 0
    error: str | None = None
    updated_at: float

    @classmethod
    def of(cls, status: DocumentStatus) -> DocumentStatusOut:
        return cls.model_validate(status.model_dump(exclude={"readers"}))


class Readiness(BaseModel):
    status: Literal["ready"] = Field(description="Only ready or not (503); details at /v1/readiness")


class IngestRequest(Strict):
    documents: list[DocumentIn] = Field(min_length=1, description="A batch; each is handled on its own.")


class IngestResponse(BaseModel):
    results: list[IngestResult]
    indexed: int
    unchanged: int
    failed: int


class BoundsIn(Strict):
    low: float | None = Field(default=None, strict=True)  # strict: a boolean is not a number
    high: float | None = Field(default=None, strict=True)


class FusionOptions(Strict):
    method: FusionMethod | None = Field(default=None, description="minmax (default), zscore or rrf")
    weights: Annotated[dict[str, StrictFloat], Field(json_schema_extra=weights_json_schema())] | None = Field(
        default=None,
        description='Per retriever (bm25, dense, graph), e.g. {"bm25": 0.5, "dense": 0.5}; 0 disables one, '
        "at least one must be > 0",
    )
    rrf_k: Annotated[int, Field(strict=True, ge=1, le=10_000), WHOLE_NUMBER] | None = Field(default=None)
    candidates: Annotated[int, Field(strict=True, ge=1, le=2000), WHOLE_NUMBER] | None = Field(
        default=None, description="Per-retriever depth"
    )
    fill_missing: bool | None = Field(default=None, strict=True)  # strict: 0, "yes" are not booleans
    link_seeds: Annotated[int, Field(strict=True, ge=0, le=MAX_LINK_SEEDS), WHOLE_NUMBER] | None = Field(
        default=None,
        description="Pages the top N fused results name by title join the reranked head (0 = off); a "
        "tenant of the linked corpus profile only (docs/corpus-profiles.md)",
    )
    backlinks: Annotated[int, Field(strict=True, ge=0, le=MAX_BACKLINKS), WHOLE_NUMBER] | None = Field(
        default=None,
        description="With link_seeds: at most this many pages that name a seed join the head (0 = off); "
        "linked corpus profile only",
    )
    graph_depth: Annotated[int, Field(strict=True, ge=1, le=MAX_GRAPH_DEPTH), WHOLE_NUMBER] | None = Field(
        default=None,
        description="Entity -> passage hops of the graph's walk when weights give graph a share "
        "(default graph.depth)",
    )
    bounds: dict[str, BoundsIn] | None = Field(
        default=None,
        description='Fixed min-max bounds per retriever, e.g. {"dense": {"low": 0, "high": 1}}; not for bm25 '
        "(fixed bounds would put raw BM25, whose scale carries corpus statistics, into the fused score)",
        json_schema_extra={"not": {"required": ["bm25"]}},
    )

    @field_validator("bounds")
    @classmethod
    def _no_bm25_bounds(cls, bounds: dict[str, BoundsIn] | None) -> dict[str, BoundsIn] | None:
        """Raw BM25 may not reach a response: fixed bounds would scale the fused score by it."""
        if bounds is not None and "bm25" in bounds:
            raise PydanticCustomError(
                "bm25_bounds",
                "fixed bounds on bm25 are refused: the fused score would reveal raw BM25, whose scale "
                "carries corpus statistics; drop bounds.bm25 (its min-max uses this query's own scores)",
            )
        return bounds

    @field_validator("weights")
    @classmethod
    def _weights_usable(cls, weights: dict[str, float] | None) -> dict[str, float] | None:
        """A negative or non-finite weight would invert or swamp a retriever's scores in the fusion."""
        problem = weights_problem(weights) if weights is not None else None
        if problem is not None:
            raise PydanticCustomError("weights_range", problem[1])
        return weights


class RerankOptionsIn(Strict):
    enabled: bool | None = Field(
        default=None, strict=True, description="false: fused order only (skips the cross-encoder)"
    )
    depth: Annotated[int, Field(strict=True, ge=1, le=200), WHOLE_NUMBER] | None = Field(
        default=None, description="Fused candidates to rerank"
    )
    mode: Literal["auto", "residual", "fused", "pure"] | None = Field(
        default=None,
        description="residual: logit + learned weight x first-stage; fused: min-max blend; pure: cross-encoder order",
    )
    weight: float | None = Field(
        default=None, strict=True, ge=0.0, le=1.0, description="Reranker weight in fused mode"
    )
    link_weight: float | None = Field(
        default=None,
        strict=True,
        ge=0.0,
        le=1.0,
        description="Two-hop lift: pages linked by title to the two best rise this share of the way to their "
        "score (0 = off); linked corpus profile only (docs/corpus-profiles.md)",
    )


class FactCheckOptionsIn(Strict):
    enabled: bool | None = Field(default=None, strict=True, description="false: return results unjudged")
    depth: Annotated[int, Field(strict=True, ge=1, le=100), WHOLE_NUMBER] | None = Field(
        default=None, description="Top results judged (at least top_k)"
    )
    min_keep: Annotated[int, Field(strict=True, ge=0, le=100), WHOLE_NUMBER] | None = Field(
        default=None, description="Below this many RELEVANT, re-admit non-adversarial ones"
    )


MAX_HISTORY_TURNS = 200

# What PipelineService checks on a request's shape, stated for the OpenAPI document so that a request
# the schema admits is not refused (tests/unit/test_api_schema_rules.py holds each statement to its
# check). Not both a session and a history: the server could not tell which conversation is meant.
ONE_CONVERSATION: JsonDict = {
    "not": {
        "required": ["session_id", "history"],
        "properties": {"session_id": {"type": "string"}, "history": {"type": "array", "minItems": 1}},
    }
}
# adaptive=true: the route picks the stages, so no fusion/rerank/factcheck options; a plain search has
# no conversation, so no session_id and no (non-empty) history.
ADAPTIVE_OR_PLAIN: JsonDict = {
    "anyOf": [
        {
            "required": ["adaptive"],
            "properties": {
                "adaptive": {"const": True},
                "fusion": {"type": "null"},
                "rerank": {"type": "null"},
                "factcheck": {"type": "null"},
            },
        },
        {
            "properties": {
                "adaptive": {"const": False},
                "session_id": {"type": "null"},
                "history": {"maxItems": 0},
            }
        },
    ]
}
QUERY_RULE = (
    "; at least one letter or digit in any script (the pattern: Unicode categories L and N), at most "
    "gateway.max_query_chars characters"
)


class Conversation(Strict):
    """Conversation context of an adaptive request: a session the server keeps, or the caller's history."""

    model_config = ConfigDict(json_schema_extra=ONE_CONVERSATION)

    session_id: Annotated[str, Field(json_schema_extra={"pattern": SESSION_ID_PATTERN})] | None = Field(
        default=None, description="From a previous response; omit to start a new session (not with history)"
    )
    history: list[str] | None = Field(
        default=None,
        max_length=MAX_HISTORY_TURNS,
        description="Earlier queries, oldest first, instead of a session (the last sessions.max_turns are used)",
    )

    @field_validator("session_id")
    @classmethod
    def _minted(cls, session_id: str | None) -> str | None:
        """Only an id the server could have minted (the schema's pattern): ``""`` is not "no session"."""
        problem = session_id_problem(session_id) if session_id is not None else None
        if problem is not None:
            raise PydanticCustomError("session_id", problem)
        return session_id


class SearchRequest(Conversation):
    model_config = ConfigDict(json_schema_extra={**ONE_CONVERSATION, **ADAPTIVE_OR_PLAIN})

    query: str = Field(
        min_length=1, description="Free text" + QUERY_RULE, json_schema_extra={"pattern": WORD_PATTERN}
    )
    adaptive: bool = Field(
        default=False,
        strict=True,
        description="Route the query (Simple/Conversational/Complex), rewrite follow-ups, chain multi-hop "
        "questions and grade the results (CRAG); false: one hybrid search with the request's knobs",
    )
    top_k: WholeInt = Field(
        default=DEFAULT_TOP_K,
        ge=1,
        strict=True,
        description="Number of chunks to return (at most gateway.max_top_k)",
    )
    tenant: Name | None = Field(default=None, description="Must be the caller's tenant if given")
    filters: SearchFilters | None = None
    fusion: FusionOptions | None = None
    rerank: RerankOptionsIn | None = None
    factcheck: FactCheckOptionsIn | None = None


class VerdictOut(BaseModel):
    verdict: Verdict
    score: float = Field(description="Confidence in the verdict, 0-1")
    reason: str


class FilteredHit(BaseModel):
    """A judged result the fact-check withheld: enough to audit it, not its text."""

    chunk_id: str
    doc_id: str
    verdict: Verdict
    score: float
    reason: str


class SearchHit(BaseModel):
    rank: int
    chunk_id: str
    doc_id: str
    title: str
    section_path: list[str]
    header: str
    text: str
    source: str
    version: int
    scores: dict[str, float | None] = Field(
        description="Score per retriever: 'bm25' relative to the best BM25 score among these results (0-1; "
        "raw BM25 would carry other tenants' corpus statistics), 'dense' the cosine, and the cross-encoder "
        "logit under 'rerank' if reranked"
    )
    ranks: dict[str, int | None] = Field(description="Rank in each retriever's own list (null: not found)")
    fused: float = Field(description="Final ranking score (after reranking for the reranked top results)")
    verdict: VerdictOut | None = Field(default=None, description="Fact-check verdict (null: not judged)")


class RouteOut(BaseModel):
    type: str = Field(description="simple, conversational or complex")
    complexity: str = Field(description="low, medium or high: picks the retrieval parameters")
    confidence: float
    reason: str = ""


class GradeOut(BaseModel):
    grade: str = Field(description="CRAG grade of the retrieved set: correct, ambiguous or incorrect")
    score: float
    action: str = Field(description="refine, secondary or both")
    secondary: str | None = Field(default=None, description="The secondary source asked, if any")
    rewritten_query: str | None = None


class HopOut(BaseModel):
    step: int
    sub_query: str
    score: float
    chunk_ids: list[str]


class ChainOut(BaseModel):
    hops: list[HopOut]
    score: float
    stopped: str = Field(description="Why the chain stopped: score, max_steps, no_gain, ...")


class AdaptiveOut(BaseModel):
    """What the adaptive pipeline did with the request."""

    route: RouteOut
    searched_query: str = Field(description="The query searched (follow-ups are rewritten)")
    rewrite: str = Field(description="none, rules or llm")
    grade: GradeOut | None = None
    chain: ChainOut | None = None
    retrieval_calls: int
    session_id: str | None = Field(default=None, description="Send it with the next turn")


class GraphOut(BaseModel):
    status: Literal["used", "no_graph", "no_entity"] = Field(
        description="used; no_graph (the index stores no graph: listed in degraded too); no_entity (the "
        "query names nothing the graph knows: BM25 and dense carried the search)"
    )
    linked: list[str] = Field(description="The query's entities the walk started from")


class SearchResponse(BaseModel):
    query: str
    results: list[SearchHit]
    candidates: dict[str, int]
    timings_ms: dict[str, float]
    degraded: list[str] = Field(
        default_factory=list,
        description='Stages skipped for this response, e.g. ["rerank"] when the reranker is down, '
        '["factcheck"] when results are unverified',
    )
    filtered: list[FilteredHit] = Field(
        default_factory=list, description="Judged results withheld by the fact-check, with the reason"
    )
    factcheck_fallback: bool = Field(
        default=False,
        description="Fewer than factcheck.min_keep results were RELEVANT: non-adversarial ones were re-admitted",
    )
    adaptive: AdaptiveOut | None = Field(default=None, description="Present when the request was adaptive")
    graph: GraphOut | None = Field(
        default=None, description="Present when the search asked for the knowledge graph (weights.graph > 0)"
    )
    request_id: str
    trace_id: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{32}$",
        description="OpenTelemetry trace id of this request (32 hex digits): find its spans in your tracing "
        "backend; also in the X-Trace-Id header",
    )


class AnswerRequest(Conversation):
    query: str = Field(
        min_length=1, description="The question" + QUERY_RULE, json_schema_extra={"pattern": WORD_PATTERN}
    )
    top_k: WholeInt = Field(
        default=DEFAULT_TOP_K,
        ge=1,
        strict=True,
        description="Results returned beside the answer (at most gateway.max_top_k)",
    )
    tenant: Name | None = Field(default=None, description="Must be the caller's tenant if given")
    filters: SearchFilters | None = None


class CitationOut(BaseModel):
    n: int = Field(description="The [n] used in the answer")
    doc_id: str
    chunk_id: str
    title: str
    source: str
    quote: str


class AnswerResponse(BaseModel):
    query: str
    answer: str = Field(description="Empty when nothing verified answers the question")
    method: str = Field(description="extractive, llm, llm-direct (no retrieval) or none")
    caution: str | None = Field(
        default=None,
        description="Why the answer may not be reliable: retrieval graded incorrect, the fact-check re-admitted "
        "passages it did not judge relevant, or did not run. An extractive answer then starts 'No document "
        "clearly answers this; ...'",
    )
    citations: list[CitationOut]
    retrieval_skipped: bool = Field(
        default=False, description="Simple question answered by the LLM without retrieval: not verified"
    )
    results: list[SearchHit] = Field(description="The verified results the answer drew on")
    adaptive: AdaptiveOut
    degraded: list[str] = Field(default_factory=list)
    filtered: list[FilteredHit] = Field(default_factory=list)
    factcheck_fallback: bool = Field(
        default=False,
        description="Fewer than factcheck.min_keep results were RELEVANT: non-adversarial ones were re-admitted",
    )
    timings_ms: dict[str, float]
    request_id: str
    trace_id: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{32}$",
        description="OpenTelemetry trace id of this request (32 hex digits): find its spans in your tracing "
        "backend; also in the X-Trace-Id header",
    )


class DeleteResponse(BaseModel):
    id: str
    deleted: bool
