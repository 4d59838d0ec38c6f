"""The corpus profile (docs/corpus-profiles.md): ``generic`` by default, ``linked`` per tenant, a bad
value named with its fix; one search pipeline serving two tenants, each by its own profile (the link
stream, the two-hop lift, the fact-check's bridge rule); evidence pairs for a linked corpus only; and
the evaluation tenant's profile set by ``rampart eval --profile``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt
import pytest
from pydantic import ValidationError

from services.common.config import CorpusProfile, CorpusSettings
from services.common.settings import RampartSettings
from services.common.types import Chunk, Principal, ScoredChunk
from services.common.verdicts import Judgement, Verdict
from services.evaluation.attack import Query, apply_factcheck, first_stages
from services.evaluation.runner import EVAL_TENANT, with_profile
from services.factcheck.checker import CheckOutcome
from services.factcheck.config import FactCheckSettings
from services.factcheck.evidence import CheckInput
from services.factcheck.in_process import InProcessFactChecker
from services.factcheck.stage import FactCheckStage
from services.orchestrator.chain.config import ChainSettings
from services.orchestrator.chain.pair_order import SHIPPED_PAIRS, PairModel
from services.orchestrator.orchestrator import pair_plan
from services.orchestrator.plan import Complexity, QueryType, Route
from services.orchestrator.search import SearchPipeline
from services.rerank.config import RerankSettings
from services.rerank.stage import RerankStage
from services.retrieval.config import FusionSettings
from services.retrieval.hybrid import SearchOutcome, SearchParams
from services.retrieval.links.options import NO_LINKS


def test_generic_is_the_default() -> None:
    corpus = RampartSettings().corpus
    assert corpus.profile is CorpusProfile.GENERIC and corpus.tenants == {}
    assert corpus.of("anyone") is CorpusProfile.GENERIC and not corpus.linked("anyone")
    assert not corpus.any_linked()


def test_a_tenant_overrides_the_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAMPART_CORPUS__TENANTS", '{"wiki": "linked"}')
    corpus = RampartSettings().corpus
    assert corpus.linked("wiki") and not corpus.linked("papers") and corpus.any_linked()
    monkeypatch.setenv("RAMPART_CORPUS__PROFILE", "linked")
    monkeypatch.setenv("RAMPART_CORPUS__TENANTS", '{"papers": "generic"}')
    corpus = RampartSettings().corpus
    assert corpus.linked("wiki") and not corpus.linked("papers")


def test_with_tenant_copies() -> None:
    base = CorpusSettings(tenants={"wiki": CorpusProfile.LINKED})
    both = base.with_tenant("eval", CorpusProfile.LINKED)
    assert both.linked("eval") and both.linked("wiki") and not base.linked("eval")
    assert not both.with_tenant("wiki", CorpusProfile.GENERIC).linked("wiki")


def test_an_empty_variable_means_no_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAMPART_CORPUS__TENANTS", "")
    assert RampartSettings().corpus.tenants == {}


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        (
            "RAMPART_CORPUS__PROFILE",
            "wiki",
            "corpus.profile = 'wiki' is not a corpus profile; use one of generic, linked",
        ),
        (
            "RAMPART_CORPUS__TENANTS",
            '{"wiki": "linkd"}',
            "corpus.tenants['wiki'] = 'linkd' is not a corpus profile",
        ),
        ("RAMPART_CORPUS__TENANTS", "wiki=linked", "corpus.tenants = 'wiki=linked' is not JSON"),
        ("RAMPART_CORPUS__TENANTS", '["wiki"]', "must map tenant names to profiles, got list"),
        ("RAMPART_CORPUS__TENANTS", '{"no tenant": "linked"}', "names 'no tenant', which is no tenant name"),
    ],
)
def test_a_bad_value_is_named_with_its_fix(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, said: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as caught:
        RampartSettings()
    message = str(caught.value)
    assert said in message and name in message, message


# ---- per request, by the principal's tenant -------------------------------------------------------

WIKI = Principal(tenant="wiki", user="u")  # linked
PAPERS = Principal(tenant="papers", user="u")  # generic (the default)
CORPUS = CorpusSettings(tenants={"wiki": CorpusProfile.LINKED})
Q = "When did the sultan who commissioned the Laleli Mosque reign?"


def scored(doc: str, text: str, fused: float, title: str = "", **scores: float) -> ScoredChunk:
    chunk = Chunk(chunk_id=f"{doc}#0", doc_id=doc, tenant="t", ordinal=0, title=title, text=text)
    return ScoredChunk(chunk=chunk, scores={"bm25": fused, "dense": fused, **scores}, ranks={}, fused=fused)


class Recorder:
    """A retriever returning fixed hits and keeping the params of every search."""

    def __init__(self, hits: list[ScoredChunk]) -> None:
        self.hits = hits
        self.params: list[SearchParams] = []

    def search(self, query: str, principal: Principal, params: SearchParams) -> SearchOutcome:
        self.params.append(params)
        return SearchOutcome(hits=list(self.hits), timings_ms={}, candidates={})

    def stats(self) -> dict[str, int]:
        return {}

    def close(self) -> None:
        return None


class Overlap:
    """A reranker scoring by query-word overlap (the lift's effect is then easy to read)."""

    model_id = "overlap@test"
    first_stage_weight: float | None = None

    def score(self, query: str, passages: Sequence[str]) -> list[float]:
        words = set(query.lower().split())
        return [float(len(words & set(p.lower().split()))) for p in passages]

    def check_ready(self) -> None:
        return None

    def close(self) -> None:
        return None


class Words:
    """A deterministic embedder: hashed word counts."""

    model_id = "words@test"
    dim = 64

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for r, t in enumerate(texts):
            for w in t.lower().split():
                out[r, sum(map(ord, w)) % self.dim] += 1.0
        return out + 1e-3


def test_the_link_stream_is_asked_for_a_linked_tenant_only() -> None:
    """One pipeline, two tenants: the retriever gets the link stream's settings for the wiki tenant
    and none for the generic one (and no copy leads, which only a title rule reads)."""
    recorder = Recorder([scored("a", "text", 1.0)])
    pipeline = SearchPipeline(recorder, FusionSettings(), corpus=CORPUS)
    for who in (WIKI, PAPERS):
        asked = pipeline.params(top_k=5)
        pipeline.search(Q, who, replace(asked, links=replace(asked.links, copy_leads=0.8)))
    wiki, papers = recorder.params
    defaults = FusionSettings()
    assert defaults.link_seeds > 0 and defaults.backlinks > 0
    assert (wiki.links.seeds, wiki.links.backlinks, wiki.links.copy_leads) == (
        defaults.link_seeds,
        defaults.backlinks,
        0.8,
    )
    assert papers.links == NO_LINKS


def test_the_two_hop_lift_runs_for_a_linked_tenant_only() -> None:
    """d2 shares no word with the query, but the best page names its title: lifted to second for the
    wiki tenant, left last for the generic one."""
    hits = [
        scored("d0", "remote access", 0.9, "doc 0"),
        scored("d1", "vpn access guide", 0.6, "doc 1"),
        scored("d2", "office lunch menu", 0.7, "doc 2"),
        scored("d3", "remote vpn access guide see doc 2", 0.2, "doc 3"),
    ]
    pipeline = SearchPipeline(
        Recorder(hits),
        FusionSettings(),
        RerankStage(Overlap()),
        RerankSettings(mode="pure", depth=4),
        corpus=CORPUS,
    )
    assert pipeline.rerank_options().link_weight > 0
    order = {
        who.tenant: [
            h.chunk.doc_id
            for h in pipeline.search("remote vpn access guide", who, pipeline.params(top_k=4)).hits
        ]
        for who in (WIKI, PAPERS)
    }
    assert order == {"wiki": ["d3", "d2", "d1", "d0"], "papers": ["d3", "d1", "d0", "d2"]}


def test_title_subjects_apply_for_a_linked_tenant_only() -> None:
    """A template page whose corpus near-copies open with other subjects' names is no planted copy for
    the wiki tenant and is withheld for the generic one, while the page a relevant one names is a
    bridge for both: the same pipeline tells the fact-check each tenant's profile."""
    mosque = scored(
        "mosque",
        "The Laleli Mosque in Fatih, Istanbul, was commissioned by Sultan Mustafa III.",
        1.0,
        "Laleli Mosque",
        rerank=3.0,
    )
    ruler = scored(
        "ruler", "He reigned from 1757 to 1774 and reformed the army.", 0.5, "Mustafa III", rerank=-10.0
    )
    season = scored(
        "season",
        "The 1984 Tennessee Volunteers football team played its home games at Neyland Stadium.",
        0.4,
        "1984 Tennessee Volunteers football team",
        rerank=2.0,
    ).model_copy(
        update={
            "copy_cosines": [0.91, 0.9, 0.5],
            "copy_leads": ["1985 Tennessee Volunteers", "1983 Tennessee Volunteers"],
        }
    )
    settings = FactCheckSettings(min_keep=1)
    checker = InProcessFactChecker(Words(), settings)  # type: ignore[arg-type]
    try:
        pipeline = SearchPipeline(
            Recorder([mosque, ruler, season]),
            FusionSettings(),
            factcheck=FactCheckStage(checker),
            factcheck_defaults=settings,
            corpus=CORPUS,
        )
        got = {who.tenant: pipeline.search(Q, who, pipeline.params(top_k=3)) for who in (WIKI, PAPERS)}
    finally:
        checker.close()
    assert [h.chunk.doc_id for h in got["wiki"].hits] == ["mosque", "ruler", "season"]
    for tenant in ("wiki", "papers"):
        bridge = got[tenant].hits[1].judgement
        assert bridge and bridge.reason.startswith("a bridge"), tenant
    assert [h.chunk.doc_id for h in got["papers"].hits] == ["mosque", "ruler"]
    assert [(j.doc_id, j.verdict) for j in got["papers"].filtered] == [("season", Verdict.ADVERSARIAL)]


def test_profiled_keeps_a_linked_tenant_s_options() -> None:
    pipeline = SearchPipeline(Recorder([]), FusionSettings(), corpus=CORPUS)
    params, rerank, fc = pipeline.params(top_k=5), pipeline.rerank_options(), pipeline.factcheck_options()
    assert pipeline.profiled(WIKI, params, rerank, fc) == (params, rerank, fc)
    p, r, f = pipeline.profiled(PAPERS, params, rerank, fc)
    assert (p.links, r.link_weight, f.linked) == (NO_LINKS, 0.0, False)
    assert (
        SearchPipeline(Recorder([]), FusionSettings()).profiled(WIKI, params, rerank, fc)[2].linked is False
    )


def test_evidence_pairs_only_for_a_linked_corpus() -> None:
    model = PairModel.load(SHIPPED_PAIRS)
    chain = ChainSettings()
    two_hop = Route(QueryType.COMPLEX, Complexity.HIGH, 0.9, reason="test")
    single = Route(QueryType.SIMPLE, Complexity.LOW, 0.9, reason="test")
    assert pair_plan(two_hop, chain, model, linked=True) == (model, None)  # ordered whole
    assert pair_plan(single, chain, model, linked=True) == (model, chain.low_pair_promote)
    assert pair_plan(two_hop, chain, model, linked=False)[0] is None
    assert pair_plan(single, chain, model, linked=False)[0] is None
    none = chain.model_copy(update={"low_pair_promote": 0})
    assert pair_plan(single, none, model, linked=True)[0] is None


# ---- evaluation: --profile sets the evaluation tenant's -------------------------------------------


class Told:
    """A checker that judges everything relevant and keeps what it was told about the corpus."""

    model_id = "told@test"

    def __init__(self) -> None:
        self.linked: list[bool] = []

    def check(
        self,
        query: str,
        items: Sequence[CheckInput],
        *,
        deadline_s: float,
        context: Sequence[CheckInput] = (),
        linked: bool = True,
    ) -> CheckOutcome:
        self.linked.append(linked)
        return CheckOutcome(
            [
                Judgement(chunk_id=i.chunk_id, doc_id=i.doc_id, verdict=Verdict.RELEVANT, score=1.0)
                for i in items
            ]
        )

    def check_ready(self) -> None:
        return None

    def close(self) -> None:
        return None


def test_eval_profile_is_the_eval_tenant_s() -> None:
    settings = RampartSettings()
    assert with_profile(settings, None) is settings
    linked = with_profile(settings, CorpusProfile.LINKED)
    assert linked.corpus.linked(EVAL_TENANT) and not linked.corpus.linked("acme")
    assert not settings.corpus.linked(EVAL_TENANT)


def test_the_attack_stages_follow_the_eval_tenant_s_profile() -> None:
    """``rampart eval attack`` runs the stages itself: the link stream, the copy leads and the check's
    title rules follow the evaluation tenant's profile, as the pipeline's do."""
    settings = RampartSettings()
    asked = Query("does aspirin prevent heart attacks", attacked=False, relevant={})
    for profile, want in ((CorpusProfile.GENERIC, False), (CorpusProfile.LINKED, True)):
        s = with_profile(settings, profile)
        recorder, told = Recorder([scored("a", "aspirin text", 1.0)]), Told()
        trace, head = first_stages(asked, recorder, RerankStage(None), s, k=10)
        apply_factcheck(trace, asked.query, head, FactCheckStage(told), s)
        (params,) = recorder.params
        links = (params.links.seeds, params.links.backlinks, params.links.copy_leads > 0)
        assert links == ((3, 2, True) if want else (0, 0, False)), profile
        assert told.linked == [want], profile


def test_copy_texts_are_asked_for_only_when_a_rule_reads_them() -> None:
    """The search reads the close copies' text (word overlaps, edits of older copies) only when the
    check will use it: down to edit_cosine for the altered-copies rule (on by default), copy_threshold
    for the copy_planting test alone, nothing when neither is on."""
    asked: dict[tuple[bool, bool], float] = {}
    for altered, planting in ((True, False), (False, True), (False, False)):
        settings = FactCheckSettings(min_keep=1, altered_copies=altered, copy_planting=planting)
        checker = InProcessFactChecker(Words(), settings)  # type: ignore[arg-type]
        recorder = Recorder([scored("a", "aspirin text", 1.0)])
        try:
            pipeline = SearchPipeline(
                recorder, FusionSettings(), factcheck=FactCheckStage(checker), factcheck_defaults=settings
            )
            pipeline.search(Q, PAPERS, pipeline.params(top_k=3))
        finally:
            checker.close()
        asked[(altered, planting)] = recorder.params[-1].copy_overlap
    d = FactCheckSettings()
    assert asked == {(True, False): d.edit_cosine, (False, True): d.copy_threshold, (False, False): 0.0}
