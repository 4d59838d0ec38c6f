"""Settings of the fact-check stage: the detectors' thresholds, the backend, the Celery workers.

- :class:`FactCheckSettings` (``factcheck``): read by
  :func:`~services.factcheck.checker.build_fact_checker`, the evidence functions and the classifier
  (every threshold), the search pipeline (depths, deadline), and CRAG's grader (``calibration``);
- :class:`CelerySettings` (``factcheck.celery``): the distributed backend, read by the Celery app, its
  checker and ``rampart worker``.

The values ``rampart tune factcheck`` fits (:data:`FITTED`) are not literals here: they are read from a
versioned artifact, the shipped ``services/models/artifacts/factcheck/policy.json`` (its manifest and
card say what they were fitted on) or the one ``factcheck.policy_dir`` names. The file is read by path,
not imported, so this module stays a leaf every layer may import.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError, model_validator

from services.common.artifact_json import read_table

POLICY_FILE = "policy.json"
POLICY_FORMAT = "rampart-factcheck-policy-v1"
SHIPPED_POLICY_DIR = Path(__file__).resolve().parents[1] / "models" / "artifacts" / "factcheck"
# What `rampart tune factcheck` fits: the calibration and every name its GRID searches.
FITTED: tuple[str, ...] = (
    "calibration",
    "duplicate_threshold",
    "duplicate_min_docs",
    "context_depth",
    "copy_threshold",
    "copy_min_docs",
    "copy_border_threshold",
    "copy_border_slack",
    "claim_join_threshold",
    "claim_share",
    "conflict_threshold",
    "coverage_threshold",
    "relevance_threshold",
)
# The rules that read document titles: what the linked corpus profile turns on (FactCheckSettings.for_corpus).
TITLE_RULES: tuple[str, ...] = ("title_links", "copy_subjects")
_REFIT = "rewrite it with `rampart tune factcheck --out DIR`, or unset RAMPART_FACTCHECK__POLICY_DIR"


@lru_cache(maxsize=16)
def load_policy(path: Path) -> Mapping[str, Any]:
    """The fitted values in a ``policy.json`` (read once per path), each checked against its setting's
    type and bounds: a policy that is missing, malformed or out of range fails here, naming the file,
    the key and the fix, instead of surfacing as an odd verdict later."""
    values = read_table(
        path, what="fact-check policy", fmt=POLICY_FORMAT, table="values", keys=FITTED, fix=_REFIT
    )
    checked = {}
    for name in FITTED:
        field = FactCheckSettings.model_fields[name]
        kind: Any = Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation
        try:
            checked[name] = TypeAdapter(kind).validate_python(values[name])
        except ValidationError as exc:
            reason = exc.errors()[0]["msg"]
            raise ValueError(
                f"fact-check policy {path}: {name}={values[name]!r} is invalid ({reason}); {_REFIT}"
            ) from None
    return MappingProxyType(checked)


def _shipped(name: str) -> Callable[[], Any]:
    """Default factory of a fitted setting: its value in the shipped policy."""
    return lambda: load_policy(SHIPPED_POLICY_DIR / POLICY_FILE)[name]


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
    the NQ-open oracle passages + the train half of HotpotQA-500 (docs/factcheck.md; each grid: the
    fact-check entries of docs/journal/).
    The fitted ones (:data:`FITTED`) default to the shipped policy artifact's values."""

    enabled: bool = Field(default=True, description="Judge the top results of every search")
    backend: Literal["inprocess", "celery", "none"] = Field(
        default="inprocess", description="inprocess: thread pool; celery: Redis-backed workers"
    )
    depth: int = Field(default=10, ge=1, le=100, description="Top-M results judged (HAC: M = 5)")
    context_depth: int = Field(
        default_factory=_shipped("context_depth"),
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
    detector_budget_ms: float = Field(
        default=250.0,
        ge=0.0,
        le=60_000.0,
        description="CPU time the detectors may take on one passage (~1 ms for a chunk, under 60 ms for "
        "20,000 characters): past it the rest are skipped and the passage is ADVERSARIAL (overrun); 0 = no "
        "budget (docs/security.md, Bounded time)",
    )
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
    altered_copies: bool = Field(
        default=True,
        description="A passage that repeats an older document word for word but for one or two claims it "
        "replaced (not its subject, not a word the query names, not a spelling), arrived after the "
        "passages around it, is ADVERSARIAL: a genuine passage with its answer swapped (detectors/altered_copy.py; needs copy_min_docs > 0, "
        "which makes the search report the copies; docs/factcheck.md, 'altered copies')",
    )
    edit_cosine: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Claim cosine down to which a result's closest copies are read for the altered-copies "
        "rule: one swapped name moves a short passage's claim vector well below copy_threshold (0.65–0.92 on "
        "RGB's edits). Sharing more than half the words decides; this only bounds what is read",
    )
    duplicate_threshold: float = Field(
        default_factory=_shipped("duplicate_threshold"),
        ge=0.0,
        le=1.0,
        description="Embedding cosine within which passages of different documents are near-duplicates "
        "(the DBSCAN radius of the cluster detector)",
    )
    duplicate_min_docs: int = Field(
        default_factory=_shipped("duplicate_min_docs"),
        ge=2,
        le=50,
        description="Documents in a near-duplicate cluster that make it ADVERSARIAL",
    )
    copy_threshold: float = Field(
        default_factory=_shipped("copy_threshold"),
        ge=0.0,
        le=1.0,
        description="Claim-vector cosine (chunk text without its header) at which another document's "
        "chunk is a near-copy (the planted-copies detector; needs index.claim_vectors)",
    )
    copy_min_docs: int = Field(
        default_factory=_shipped("copy_min_docs"),
        ge=0,
        le=8,
        description="Other documents with a near-copy that make a passage ADVERSARIAL; 0 = off "
        "(raise it for corpora full of mirrored or templated pages)",
    )
    copy_island_gap: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Planted copies must stand apart: the closest other document outside the group lies at "
        "least this far (claim cosine) below the group's farthest member. Planted paraphrases form an "
        "island; documents on one subject (abstracts of one field) a continuum; 0 = off",
    )
    arrival_order: bool = Field(
        default=True,
        description="Planted groups must have arrived late: a passage with near-copies in the corpus, or one of "
        "a near-duplicate cluster in the results, is withheld only when the index wrote it after at least "
        "half of the passages of its check that no attack rule flags (its own copies and document aside); "
        "one that came with the documents around it (abstracts of one field loaded together) stays, its "
        "copies or cluster noted in its reason. A campaign is planted into a corpus that exists; passages "
        "without a known write order are withheld as before (docs/factcheck.md, 'arrival order')",
    )
    copy_planting: bool = Field(
        default=False,
        description="Off: a trade, not a fix (docs/journal/2026-11-28-burst.md). With arrival_order, a late passage with near-copies is withheld only when the group also "
        "shows how it was planted: it and its copies arrived in one burst (a campaign written in one go), "
        "or it is an edited copy of an older passage (most of its words shared with an older near-copy). "
        "Documents of one field that say the same thing arrive apart and share few words; they stay, "
        "their copies noted in their reason (docs/factcheck.md, 'how the copies were planted')",
    )
    late_bursts: bool = Field(
        default=False,
        description="Experimental, off until measured on every row: a passage flagged as one of a "
        "near-duplicate cluster, a planted-copies group or a planted claim stands when it was written "
        "before the group's late burst (the group's write orders cut at their widest gap, the part after "
        "it written together): the corpus's own rewordings of the truth, not the campaign planted after "
        "them (docs/factcheck.md, rule 1, 'arrival order')",
    )
    copy_subjects: bool = Field(
        default=True,
        description="A near-copy that opens with a name neither the passage nor the query uses (a template "
        "family: '2011 Colorado Buffaloes football team' beside the 2009 page) does not count toward "
        "copy_min_docs (services/common/subjects.py); linked corpus profile only (docs/corpus-profiles.md)",
    )
    copy_border_threshold: float = Field(
        default_factory=_shipped("copy_border_threshold"),
        ge=0.0,
        le=1.0,
        description="Claim-vector cosine within which a passage joins a planted group through a member "
        "that has copy_min_docs near-copies itself (DBSCAN's border members; the search fetches those "
        "members' copies too); 0 = off",
    )
    copy_border_slack: float = Field(
        default_factory=_shipped("copy_border_slack"),
        ge=0.0,
        le=1.0,
        description="How far below the core member's own copy_min_docs-th near-copy cosine a border "
        "member may lie (a genuine paragraph on the planted subject lies farther out than the "
        "planted siblings); 1 = no such condition",
    )
    claim_join_threshold: float = Field(
        default_factory=_shipped("claim_join_threshold"),
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
        default_factory=_shipped("claim_share"),
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
        default_factory=_shipped("relevance_threshold"),
        ge=0.0,
        le=1.0,
        description="Calibrated P(relevant) from the reranker logit below which a passage may be IRRELEVANT",
    )
    calibration: tuple[float, float] = Field(
        default_factory=_shipped("calibration"),
        description="Platt scaling (a, b): P(relevant) = sigmoid(a * logit + b)",
    )
    coverage_threshold: float = Field(
        default_factory=_shipped("coverage_threshold"),
        ge=0.0,
        le=1.0,
        description="Best strip's share of the query terms below which no strip addresses the query",
    )
    conflict_threshold: float = Field(
        default_factory=_shipped("conflict_threshold"),
        ge=0.0,
        le=1.0,
        description="Claim-conflict score between two passages that counts",
    )
    contradiction_threshold: float = Field(
        default=0.9,
        ge=0.0,
        le=1.0,
        description="The contradiction classifier's P(CONTRADICT) between two passages that counts as a conflict",
    )
    title_links: bool = Field(
        default=True,
        description="Read document titles as subjects: two passages each about its own titled subject "
        "(neither names the other) are never compared for conflicts nor count as a near-duplicate "
        "cluster (docs/factcheck.md); linked corpus profile only (docs/corpus-profiles.md)",
    )
    title_bridges: bool = Field(
        default=True,
        description="A passage a standing one names by title (or that names a standing one's title and "
        "holds a query term that one lacks), or whose title the query names, is a bridge, not "
        "IRRELEVANT: it only undoes rule 2, so it runs for every corpus profile (docs/factcheck.md, "
        "'Bridges stay'; docs/corpus-profiles.md)",
    )
    contradiction_pairs: int = Field(
        default=0,
        ge=0,
        le=200,
        description="Most similar passage pairs per check read by the contradiction classifier (2 model "
        "calls each); 0 = claim alignment only (the default; why, and the cost, in docs/factcheck.md)",
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
    policy_dir: Path | None = Field(
        default=None,
        description="Folder with a fitted fact-check policy (policy.json, manifest.json, MODEL_CARD.md; written "
        "by `rampart tune factcheck --out`) whose values replace the defaults of the settings it fits "
        "(calibration and the thresholds it grid-searches); settings set explicitly still win; unset = "
        "the shipped one (services/models/artifacts/factcheck)",
    )
    celery: CelerySettings = CelerySettings()

    @model_validator(mode="before")
    @classmethod
    def _fill_from_policy(cls, data: Any) -> Any:
        """With ``policy_dir``, every fitted setting the caller did not set comes from that policy (the
        shipped one fills them otherwise, through the fields' default factories)."""
        if isinstance(data, dict) and data.get("policy_dir") is not None:
            policy = load_policy(Path(data["policy_dir"]) / POLICY_FILE)
            return {**policy, **data}
        return data

    def copy_overlap(self) -> float:
        """The claim cosine down to which the search reads each result's close copies' text (word
        overlaps, edits of older copies); 0 when no rule reads them: the copy_planting test and the
        altered-copies rule both need the copies the planted-copies lookup finds."""
        if self.copy_min_docs <= 0:
            return 0.0
        floors = [self.copy_threshold] if self.arrival_order and self.copy_planting else []
        floors += [self.edit_cosine] if self.altered_copies and self.edit_cosine > 0 else []
        return min(floors, default=0.0)

    def for_corpus(self, linked: bool) -> FactCheckSettings:
        """The settings a check of one tenant's corpus decides with: these, for a ``linked`` corpus;
        without the rules that read document titles (:data:`TITLE_RULES`) for a generic one, whose
        documents do not name each other, so a title a passage spells says nothing about how it relates
        to another passage (docs/corpus-profiles.md)."""
        return self if linked else self.model_copy(update=dict.fromkeys(TITLE_RULES, False))

    def resolve_contradiction_model_dir(self, models_dir: Path) -> Path:
        """``contradiction_model_dir``, or the folder ``rampart models build`` installs it in."""
        return self.contradiction_model_dir or models_dir / "contradiction"
