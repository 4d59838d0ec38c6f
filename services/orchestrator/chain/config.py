"""Settings of chain-of-retrieval: :class:`ChainSettings` (``chain``), read by the chain retriever
(beam, steps, stops, scores), the sub-query proposer's factory (``use_llm``) and the orchestrator's
evidence-pair ordering (``pair_*``, ``low_pair_promote``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class ChainSettings(BaseModel):
    """Chain-of-retrieval for Complex queries (CoRAG, papers.md §5)."""

    # B = 1: CoRAG's 4 more than doubles the retrieval calls for no gain (figures: docs/chain.md).
    beam_width: int = Field(default=1, ge=1, le=16, description="Beams kept per step (B; CoRAG uses 4)")
    max_steps: int = Field(default=5, ge=1, le=10, description="Retrieval steps at most, the first included")
    stop_score: float = Field(
        default=0.9, ge=0.0, le=1.0, description="Stop once the best chain scores above this"
    )
    hop_k: int = Field(default=3, ge=1, le=20, description="Results each sub-query contributes (CoRAG: 3)")
    # 0.6: saves calls without stopping chains that need their hop; tuned on HotpotQA train (docs/chain.md).
    apart_ratio: float | None = Field(
        default=0.6,
        gt=0.0,
        le=1.0,
        description=(
            "Stop after the first search when its 2nd result leads the 3rd by at least this share of the "
            "1st-to-5th score spread (the top two stand apart); unset = never"
        ),
    )
    # 0.3: the best of the values checked on HotpotQA train (docs/chain.md).
    relevance_weight: float = Field(
        default=0.3,
        ge=0.0,
        le=1.0,
        description="Chain score = (1-w)*question-term coverage + w*mean lead relevance (docs/chain.md)",
    )
    use_llm: bool = Field(
        default=True, description="Propose sub-queries with the LLM at llm.base_url when one is set"
    )
    # 0.4: set by hand (not swept) so weakly matching spans cost no call (calls per query: docs/chain.md).
    min_prior: float = Field(
        default=0.4,
        ge=0.0,
        le=1.0,
        description="A sub-query gets a retrieval call only if its proposer prior reaches this",
    )
    # On: its lift on held-out questions is in docs/chain.md ("Evidence pairs").
    pair_order: bool = Field(
        default=True,
        description="Complex questions: put the pair of verified results most likely to answer together "
        "first (a learned pair model over the top chain.pair_depth documents; docs/chain.md); for tenants "
        "of the linked corpus profile (docs/corpus-profiles.md)",
    )
    # 20: tuned on HotpotQA train (docs/chain.md, "Cross-fitted pair model, 20 deep").
    pair_depth: int = Field(
        default=20,
        ge=3,
        le=30,
        description="Verified documents whose pairs the pair model scores; the fact-check judges at least "
        "this many results of a Complex question",
    )
    # 2: tuned on HotpotQA, NQ-open and SciFact (docs/chain.md, "Two-hop questions read as single-fact").
    low_pair_promote: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Routes of low complexity: documents the pair model moves to just behind the "
        "reranker's top two (a two-hop question the router misreads still gets its bridge page); 0 = none; "
        "linked corpus profile only",
    )
    pair_model_dir: Path | None = Field(
        default=None,
        description="Folder with the pair model's weights.json (`rampart train pairs`); unset = the "
        "shipped one",
    )
