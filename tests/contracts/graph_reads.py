"""The ``GraphReads`` contract (services/retrieval/graph/reads.py): what the knowledge graph's walk
may rely on from an index that stores mentions. Subclass :class:`GraphReadsContract` beside
:class:`~tests.contracts.search_index.SearchIndexContract` in the implementation's test file (same
``make_index``); an index without a graph (the remote one) does not.

The promise that matters is the ACL: postings are scoped like every search, so a principal never
learns of an entity that only passages it may not read mention, nor of how many such passages exist.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.types import DocumentState, SearchFilters
from services.retrieval.doc_store import DocumentWrite
from services.retrieval.graph.reads import MAX_KEYS, GraphReads, graph_reads
from services.retrieval.index import SearchIndex
from tests.contracts.search_index import ALICE, BOB, EVE, cid_of, doc

DIRECTOR, FUND, FILM, CITY = "adrian powers", "orion capital", "forbidden ground", "melbourne"


def corpus() -> list[DocumentWrite]:
    """A public page (two chunks), an HR memo (the only mention of the fund in t1), the same
    director in another tenant, and a memo with metadata (for the filters)."""
    return [
        doc("film", ["tokfilm one", "tokfilm two"], entities=[(FILM, DIRECTOR), (DIRECTOR,)]),
        doc("memo", ["tokmemo"], groups=["hr"], entities=[(DIRECTOR, FUND)]),
        doc("other", ["tokother"], tenant="t2", entities=[(DIRECTOR, FUND)]),
        doc("city", ["tokcity"], metadata={"kind": "memo"}, entities=[(CITY, DIRECTOR)]),
    ]


def reads(ix: SearchIndex) -> GraphReads:
    got = graph_reads(ix)
    assert got is ix, f"{type(ix).__name__} does not serve GraphReads"
    return got


class GraphReadsContract:
    """Mixed in beside SearchIndexContract, whose ``make_index`` fixture (provided by the
    implementation's test class) it uses: no fixture of its own to keep in step."""

    def test_postings_are_scoped_like_every_search(self, make_index: Callable[[], SearchIndex]) -> None:
        ix = make_index()
        ix.write(corpus())
        g = reads(ix)
        film = [cid_of(ix, "film", 0), cid_of(ix, "film", 1)]
        city, memo = cid_of(ix, "city"), g.entity_postings([FUND], BOB, 10)[FUND][0]
        assert g.entity_postings([DIRECTOR, FUND, CITY, "nobody"], ALICE, 10) == {
            DIRECTOR: sorted([*film, city]),
            CITY: [city],
        }  # the fund: only the HR memo mentions it in t1, so it is unknown to alice, not counted
        assert g.entity_postings([DIRECTOR], BOB, 10) == {DIRECTOR: sorted([*film, city, memo])}
        assert set(g.entity_postings([DIRECTOR, FUND], EVE, 10)) == {DIRECTOR, FUND}  # t2's own page
        assert g.entity_postings([DIRECTOR], BOB, 2) == {DIRECTOR: sorted([*film, city, memo])[:2]}
        assert g.entity_postings([DIRECTOR, DIRECTOR], ALICE, 1) == {DIRECTOR: [min([*film, city])]}
        only = SearchFilters(metadata={"kind": "memo"})
        assert g.entity_postings([DIRECTOR], BOB, 10, filters=only) == {DIRECTOR: [city]}
        assert g.entity_postings([DIRECTOR], BOB, 10, filters=SearchFilters(doc_ids=["film"])) == {
            DIRECTOR: film
        }

    def test_chunk_entities_are_what_was_written(self, make_index: Callable[[], SearchIndex]) -> None:
        ix = make_index()
        ix.write([*corpus(), doc("plain", ["tokplain"])])
        g = reads(ix)
        film, plain = [cid_of(ix, "film", 0), cid_of(ix, "film", 1)], cid_of(ix, "plain")
        got = g.chunk_entities([*film, plain, 10**9])
        assert {c: sorted(v) for c, v in got.items()} == {
            film[0]: sorted([FILM, DIRECTOR]),
            film[1]: [DIRECTOR],
        }
        assert g.chunk_entities([]) == {}

    def test_delete_and_replace_remove_the_mentions(self, make_index: Callable[[], SearchIndex]) -> None:
        ix = make_index()
        ix.write(corpus())
        g = reads(ix)
        old = [cid_of(ix, "film", 0), cid_of(ix, "film", 1)]
        memo = g.entity_postings([FUND], BOB, 10)[FUND]
        assert ix.delete("t1", "film") is True
        assert FILM not in g.entity_postings([FILM], BOB, 10) and g.chunk_entities(old) == {}
        ix.write([doc("memo", ["tokmemo again"], groups=["hr"], version=2, entities=[(DIRECTOR,)])])
        assert FUND not in g.entity_postings([FUND], BOB, 10) and g.chunk_entities(memo) == {}
        left = g.entity_postings([DIRECTOR], BOB, 10)[DIRECTOR]
        assert len(left) == 2 and cid_of(ix, "city") in left  # the city memo and the new HR memo
        reopened = reads(make_index())
        assert reopened.entity_postings([DIRECTOR, FUND, FILM], BOB, 10) == {DIRECTOR: left}

    def test_postings_count_indexed_documents_only(self, make_index: Callable[[], SearchIndex]) -> None:
        """A document whose newer version is being ingested (``pending``) or failed is out of the graph
        until a version of it is indexed again, as it is out of ``named``: the walk follows settled
        documents only (its BM25 and dense chunks stay, the old version's: SearchIndexContract)."""
        ix = make_index()
        ix.write(corpus())
        g = reads(ix)
        film = [cid_of(ix, "film", 0), cid_of(ix, "film", 1)]
        city = cid_of(ix, "city")
        for state in (DocumentState.PENDING, DocumentState.FAILED):
            ix.mark("t1", "film", 2, state, error="parse failed" if state is DocumentState.FAILED else None)
            assert g.entity_postings([FILM, DIRECTOR], ALICE, 10) == {DIRECTOR: [city]}
        ix.write([doc("film", ["tokfilm again"], version=2, entities=[(FILM,)])])
        assert g.entity_postings([FILM], ALICE, 10) == {FILM: [cid_of(ix, "film")]}
        assert cid_of(ix, "film") not in film

    def test_bad_reads_are_refused_with_the_bound(self, make_index: Callable[[], SearchIndex]) -> None:
        g = reads(make_index())
        with pytest.raises(RampartError, match=f"at most {MAX_KEYS}") as caught:
            g.entity_postings([f"k{i}" for i in range(MAX_KEYS + 1)], ALICE, 10)
        assert caught.value.code is ErrorCode.INVALID_ARGUMENT
        with pytest.raises(RampartError, match="use 1 or more"):
            g.entity_postings([DIRECTOR], ALICE, 0)
        assert g.entity_postings([], ALICE, 10) == {}
