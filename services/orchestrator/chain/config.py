"""Settings of chain-of-retrieval: :class:`ChainSettings` (``chain``), read by the chain retriever
(beam, steps, stops, scores), the sub-query proposer's factory (``use_llm``) and the orchestrator's
evidence-pair ordering (``pair_*``, ``low_pair_promote``).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


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
