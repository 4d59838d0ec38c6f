"""The search pipeline: hybrid retrieval, then reranking; fact-check and routing plug in here.

It is the one place that turns a search request into results, used in-process by the embedded
gateway, by ``rampart eval`` (so figures measure this code) and (later) inside the Ray Serve deployment.
It is also where a tenant's corpus profile takes effect (docs/corpus-profiles.md): every search reads
the principal's tenant, and a ``generic`` corpus is searched without the features that follow titles.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from services.common.config import CorpusSettings
from services.common.tracing import stage_span
from services.common.types import Principal
from services.factcheck.config import FactCheckSettings
from services.factcheck.stage import FactCheckStage
from services.rerank.config import RerankSettings
from services.rerank.stage import Mode, RerankStage
from services.retrieval.config import FusionSettings
from services.retrieval.hybrid import SearchOutcome, SearchParams
from services.retrieval.links.options import NO_LINKS, LinkOptions
from services.retrieval.retriever import Retriever


@dataclass(frozen=True)
class RerankOptions:
    """Per-request rerank knobs; build with :meth:`SearchPipeline.rerank_options`."""

    enabled: bool
    depth: int
    mode: Mode
    weight: float
    link_weight: float = 0.0


@dataclass(frozen=True)
class FactCheckOptions:
    """Per-request fact-check knobs; build with :meth:`SearchPipeline.factcheck_options`."""

    enabled: bool
    depth: int
    min_keep: int
    deadline_s: float
    context_depth: int = 0  # results down to this rank are near-duplicate peers of the judged ones
    copies: bool = False  # ask the index for claim-vector near-copies of the judged results
    copy_expand: float = 0.0  # and for the near-copies of their closest copies at this cosine (0 = no)
    copy_leads: float = 0.0  # and the opening name of their closest copies at this cosine (0 = no)
    copy_overlap: float = 0.0  # and the word overlap with their closest copies at this cosine (0 = no)
    # the rules that read document titles apply (FactChecker.check); cleared for a generic corpus
    linked: bool = True


def generic_params(params: SearchParams) -> SearchParams:
    """``params`` for a tenant of the generic corpus profile: no link stream (``link_seeds``,
    ``backlinks``) and no copy leads, which only the linked profile's title rules read. The one list
    of search parameters a profile turns off (:meth:`SearchPipeline.profiled`, the attack evaluation)."""
    return replace(params, links=NO_LINKS)


def _with_head(links: LinkOptions, head: int) -> LinkOptions:
    """``links`` whose named pages join the first ``head`` results (unless the request set its own
    head); nothing changes when the search follows no links."""
    if links.seeds <= 0 or links.head:
        return links
    return replace(links, head=head)


class SearchPipeline:
    def __init__(
        self,
        retriever: Retriever,
        defaults: FusionSettings,
        rerank: RerankStage | None = None,
        rerank_defaults: RerankSettings | None = None,
        factcheck: FactCheckStage | None = None,
        factcheck_defaults: FactCheckSettings | None = None,
        corpus: CorpusSettings | None = None,
    ) -> None:
        """``corpus``: each tenant's corpus profile (default: every tenant ``generic``)."""
        self.retriever = retriever
        self.defaults = defaults
        self.rerank = rerank or RerankStage(None)
        self.rerank_defaults = rerank_defaults or RerankSettings()
        self.factcheck = factcheck or FactCheckStage(None)
        self.factcheck_defaults = factcheck_defaults or FactCheckSettings()
        self.corpus = corpus or CorpusSettings()

    def params(self, *, top_k: int, **overrides: Any) -> SearchParams:
        """Request parameters: settings' defaults, overridden per request (see SearchParams.from_settings)."""
        return SearchParams.from_settings(self.defaults, top_k=top_k, **overrides)

    def rerank_options(
        self,
        *,
        enabled: bool | None = None,
        depth: int | None = None,
        mode: Mode | None = None,
        weight: float | None = None,
        link_weight: float | None = None,
    ) -> RerankOptions:
        """Settings' rerank defaults overridden per request; always off when no reranker is configured."""
        d = self.rerank_defaults
        return RerankOptions(
            enabled=self.rerank.enabled and (enabled if enabled is not None else d.enabled),
            depth=depth if depth is not None else d.depth,
            mode=mode or d.mode,
            weight=weight if weight is not None else d.weight,
            link_weight=link_weight if link_weight is not None else d.link_weight,
        )

    def factcheck_options(
        self, *, enabled: bool | None = None, depth: int | None = None, min_keep: int | None = None
    ) -> FactCheckOptions:
        """Settings' fact-check defaults overridden per request; off when no checker is configured."""
        d = self.factcheck_defaults
        return FactCheckOptions(
            enabled=self.factcheck.enabled and (enabled if enabled is not None else d.enabled),
            depth=depth if depth is not None else d.depth,
            min_keep=min_keep if min_keep is not None else d.min_keep,
            deadline_s=d.deadline_ms / 1000.0,
            context_depth=d.context_depth,
            copies=d.copy_min_docs > 0,
            copy_expand=d.copy_border_threshold if d.copy_min_docs > 0 else 0.0,
            copy_leads=d.copy_threshold if d.copy_min_docs > 0 and d.copy_subjects else 0.0,
            copy_overlap=d.copy_overlap(),
        )

    def linked(self, principal: Principal) -> bool:
        """Whether ``principal``'s tenant holds a corpus whose documents name each other by title."""
        return self.corpus.linked(principal.tenant)

    def profiled(
        self, principal: Principal, params: SearchParams, rerank: RerankOptions, fc: FactCheckOptions
    ) -> tuple[SearchParams, RerankOptions, FactCheckOptions]:
        """The request's options as its tenant's corpus profile allows. A ``linked`` corpus keeps them;
        a ``generic`` one is searched without the link stream (``link_seeds``, ``backlinks``), the
        two-hop lift (``link_weight``), the fact-check's title rules (``linked``) and the copy leads
        only those rules read: on corpora whose documents do not name each other these gain nothing
        and cost quality on some (docs/corpus-profiles.md). :meth:`search` applies it to every
        search; a caller that checks on its own (the orchestrator) applies it first."""
        if self.linked(principal):
            return params, rerank, fc
        return (
            generic_params(params),
            replace(rerank, link_weight=0.0),
            replace(fc, linked=False, copy_leads=0.0),
        )

    def for_check(
        self, params: SearchParams, fc: FactCheckOptions, opts: RerankOptions, judge: int
    ) -> SearchParams:
        """``params`` asking the index for what a fact-check of the top ``judge`` results reads: stored
        embeddings (it clusters by them instead of embedding again) and, for the reranked head the judged
        results come from, each result's near-copies (the planted-copies signal). The orchestrator
        searches with the check off and checks the merged results once: its searches must fetch these
        too, or a later check judges planted text blind to its copies."""
        if not fc.enabled:
            return params
        copy_depth = max(judge, opts.depth if opts.enabled else 0) if fc.copies else 0
        return replace(
            params,
            vectors=True,
            copy_depth=max(params.copy_depth, copy_depth),
            copy_expand=max(params.copy_expand, fc.copy_expand if copy_depth else 0.0),
            copy_overlap=max(params.copy_overlap, fc.copy_overlap if copy_depth else 0.0),
            links=replace(
                params.links, copy_leads=max(params.links.copy_leads, fc.copy_leads if copy_depth else 0.0)
            ),
        )

    def search(
        self,
        query: str,
        principal: Principal,
        params: SearchParams,
        rerank: RerankOptions | None = None,
        factcheck: FactCheckOptions | None = None,
    ) -> SearchOutcome:
        params, opts, fc = self.profiled(
            principal, params, rerank or self.rerank_options(), factcheck or self.factcheck_options()
        )
        wanted = params.top_k
        # every returned result is judged: the checker sees at least top_k
        judge = max(fc.depth, wanted) if fc.enabled else 0
        peers = fc.context_depth if fc.enabled else 0
        need = max(wanted, opts.depth if opts.enabled else 0, judge, peers)
        with stage_span("rampart.search", top_k=wanted) as span:
            with stage_span("rampart.retrieve", depth=need) as rs:
                outcome = self.retriever.search(
                    query,
                    principal,
                    replace(
                        self.for_check(params, fc, opts, judge),
                        top_k=need,
                        # named pages join what the reranker reads, or the results when nothing reranks
                        links=_with_head(params.links, opts.depth if opts.enabled else wanted),
                    ),
                )
                rs.set_attributes(
                    {
                        "rampart.retrieval.candidates": len(outcome.hits),
                        **{f"rampart.retrieval.{k}": v for k, v in outcome.candidates.items()},
                    }
                )
            if opts.enabled:
                with stage_span("rampart.rerank", depth=opts.depth, mode=opts.mode) as rr:
                    result = self.rerank.apply(
                        query,
                        outcome.hits,
                        depth=opts.depth,
                        mode=opts.mode,
                        weight=opts.weight,
                        link_weight=opts.link_weight,
                    )
                    rr.set_attributes(
                        {
                            "rampart.rerank.reranked": result.reranked,
                            "rampart.rerank.lifted": result.lifted,
                            "rampart.degraded": result.degraded,
                        }
                    )
                outcome.hits = result.hits
                outcome.timings_ms["rerank"] = result.ms
                outcome.candidates["reranked"] = result.reranked
                outcome.degraded += result.degraded
            if fc.enabled:
                self.check(query, outcome, fc, judge=judge)
            outcome.hits = outcome.hits[:wanted]
            span.set_attributes({"rampart.results": len(outcome.hits), "rampart.degraded": outcome.degraded})
        return outcome

    def check(self, query: str, outcome: SearchOutcome, fc: FactCheckOptions, *, judge: int) -> None:
        """Fact-check ``outcome.hits`` in place: the top ``judge`` are judged, the results down to
        ``fc.context_depth`` are read as near-duplicate peers, with the title rules when ``fc.linked``
        (:meth:`profiled`); the orchestrator calls this once on a chain's or a corrective search's merged
        results."""
        peers = fc.context_depth
        # only judged results go on: a filtered one is not replaced by an unjudged one from below
        with stage_span("rampart.factcheck", depth=judge, context_depth=peers) as span:
            checked = self.factcheck.apply(
                query,
                outcome.hits[: max(judge, peers)],
                depth=judge,
                min_keep=fc.min_keep,
                deadline_s=fc.deadline_s,
                context_depth=peers,
                linked=fc.linked,
            )
            span.set_attributes(
                {
                    "rampart.factcheck.judged": checked.judged,
                    "rampart.factcheck.filtered": len(checked.filtered),
                    "rampart.factcheck.fallback": checked.fallback,
                    "rampart.degraded": checked.degraded,
                }
            )
        outcome.hits = checked.hits
        outcome.timings_ms["factcheck"] = checked.ms
        outcome.candidates["judged"] = checked.judged
        outcome.candidates["filtered"] = len(checked.filtered)
        outcome.filtered = checked.filtered
        outcome.fallback = checked.fallback
        outcome.degraded += checked.degraded
