"""The ``Retriever`` contract (services/retrieval/retriever.py): what the search pipeline relies on
from hybrid search, in this process or over gRPC. Subclass :class:`RetrieverContract` in the
implementation's own test file and provide ``retriever`` (tests/README.md).
"""

from __future__ import annotations

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal
from services.retrieval.config import FusionSettings
from services.retrieval.hybrid import SearchParams
from services.retrieval.retriever import Retriever

ALICE = Principal(tenant="acme", user="alice", groups=["eng"])
BOB = Principal(tenant="acme", user="bob", groups=["hr"])
EVE = Principal(tenant="globex", user="eve", groups=["eng"])
# (doc_id, tenant, ACL groups, text): one chunk each, the corpus the ``retriever`` fixture searches
DOCS = [
    ("leave", "acme", ["*"], "Parental leave is sixteen weeks, paid in full, for every employee."),
    ("vpn", "acme", ["*"], "The VPN needs a hardware token; request one from the IT service desk."),
    ("salary", "acme", ["hr"], "Salary bands for engineers are reviewed every spring by HR."),
    ("laptop", "acme", ["eng"], "Engineers get a laptop refresh every three years."),
    ("globex-leave", "globex", ["*"], "Globex parental leave is twelve weeks."),
]
EVERYTHING = "salary laptop leave vpn weeks"  # a query that matches every document


class RetrieverContract:
    """Every ``Retriever`` keeps these promises: ``search`` returns at most ``params.top_k`` hits,
    best first, only from chunks the principal may read (its tenant, its groups or ``*``); a query
    without words is ``INVALID_ARGUMENT``; ``stats`` counts the chunks searched (``chunks``).

    Provide ``retriever``: the implementation under test over an index holding exactly ``DOCS``
    (one chunk each, ``doc_id`` as given); it is closed by the fixture.
    """

    @pytest.fixture()
    def retriever(self) -> Retriever:
        raise NotImplementedError(
            f"{type(self).__name__} must provide the retriever fixture: the implementation under test over "
            "an index holding DOCS (tests/README.md)"
        )

    def test_acl_and_tenant_scope_every_search(self, retriever: Retriever) -> None:
        params = SearchParams.from_settings(FusionSettings(), top_k=10, candidates=10)

        def seen(p: Principal) -> set[str]:
            return {h.chunk.doc_id for h in retriever.search(EVERYTHING, p, params).hits}

        assert seen(ALICE) == {"leave", "vpn", "laptop"}
        assert seen(BOB) == {"leave", "vpn", "salary"}
        assert seen(EVE) == {"globex-leave"}

    def test_at_most_top_k_best_first(self, retriever: Retriever) -> None:
        for top_k in (1, 2, 3):
            params = SearchParams.from_settings(FusionSettings(), top_k=top_k, candidates=10)
            hits = retriever.search(EVERYTHING, ALICE, params).hits
            assert len(hits) == top_k
            assert [h.fused for h in hits] == sorted((h.fused for h in hits), reverse=True)
        top = retriever.search("hardware token", ALICE, SearchParams.from_settings(FusionSettings(), top_k=1))
        assert [h.chunk.doc_id for h in top.hits] == ["vpn"]

    def test_a_query_without_words_is_invalid(self, retriever: Retriever) -> None:
        with pytest.raises(RampartError) as err:
            retriever.search("   ", ALICE, SearchParams.from_settings(FusionSettings(), top_k=3))
        assert err.value.code is ErrorCode.INVALID_ARGUMENT

    def test_stats_count_the_corpus(self, retriever: Retriever) -> None:
        stats = retriever.stats()
        assert stats["chunks"] == len(DOCS), stats
