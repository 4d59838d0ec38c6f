"""Entities, the session fact graph, conversational rewrite rules and the in-memory session store."""

from __future__ import annotations

import difflib
import time

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.types import Principal
from services.orchestrator.conversation.config import SessionSettings
from services.orchestrator.conversation.entities import MAX_MENTIONS, entity_key, mentions
from services.orchestrator.conversation.fact_graph import MAX_FACTS, FactGraph
from services.orchestrator.conversation.rewrite import ConversationalRewriter
from services.orchestrator.conversation.session_memory import MemorySessionStore
from services.orchestrator.conversation.sessions import Turn, new_session

pytestmark = pytest.mark.unit

ALICE = Principal(tenant="acme", user="alice")


def lexical(query: str, names: list[str]) -> list[float]:
    return [difflib.SequenceMatcher(None, query.lower(), n.lower()).ratio() for n in names]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Who played Corliss Archer in the film Kiss and Tell?", ["Corliss Archer", "Kiss and Tell"]),
        ("Tell me about Apple Inc and Steve Jobs", ["Apple Inc", "Steve Jobs"]),
        ("The Bank of England lent money in 1694.", ["Bank of England", "1694"]),
        ('Who directed "The Godfather"?', ["The Godfather"]),
        ("Population of Norway in 2010", ["Norway", "2010"]),
        ("when was he born?", []),
        (
            'Leave "Connect automatically" on. Open the VPN client.',
            ["Connect automatically", "Leave", "Connect", "VPN"],
        ),
    ],
)
def test_mentions(text: str, expected: list[str]) -> None:
    assert mentions(text) == expected


def test_mentions_are_bounded_and_keys_normalise() -> None:
    text = " ".join(f"Name{i} Person{i} met." for i in range(100))
    assert len(mentions(text)) == MAX_MENTIONS
    assert entity_key("The Beatles") == entity_key("Beatles") == "beatles"


def test_fact_graph_proximity_and_focus() -> None:
    g = FactGraph()
    g.update(["Dune"], ["Frank Herbert", "Analog"])
    g.update(["Isaac Asimov"], ["Foundation"])
    assert g.turn == 2
    # the last turn's query entity is the focus when the new query names nothing
    assert g.focus([]) == ["isaac asimov"]
    prox = g.proximity(["dune"])
    assert prox["dune"] == 1.0 and prox["frank herbert"] == 0.5
    assert "foundation" not in prox  # another component of the graph
    ranked = g.ranked([], lambda names: [0.0] * len(names), alpha=0.6)
    assert ranked[0][0] == "Isaac Asimov"


def test_fact_graph_forgets_the_oldest_beyond_its_bound() -> None:
    g = FactGraph()
    for i in range(MAX_FACTS + 50):
        g.update([f"Entity{i}"], [])
    assert len(g.facts) == MAX_FACTS
    assert "entity0" not in g.facts and f"entity{MAX_FACTS + 49}" in g.facts


@pytest.fixture()
def dune() -> tuple[list[str], FactGraph]:
    q = "Who wrote Dune?"
    g = FactGraph()
    g.update(mentions(q), mentions("Dune is a 1965 science fiction novel by American author Frank Herbert."))
    return [q], g


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("When was he born?", "When was Frank Herbert born?"),
        ("How long is it?", "How long is Dune?"),
        ("Who published that novel?", "Who published Dune?"),
        ("What about Foundation?", "Who wrote Foundation?"),
        ("And in 1970?", "Who wrote Dune in 1970?"),
    ],
)
def test_rules_rewrite_follow_ups(query: str, expected: str, dune: tuple[list[str], FactGraph]) -> None:
    history, graph = dune
    got = ConversationalRewriter(lexical).rewrite(query, history, graph)
    assert got.query == expected
    assert got.method == "rules"


def test_rewrite_leaves_standalone_questions_and_first_turns_alone(dune: tuple[list[str], FactGraph]) -> None:
    history, graph = dune
    rw = ConversationalRewriter(lexical)
    assert rw.rewrite("When was Isaac Asimov born?", history, graph).method == "none"
    assert rw.rewrite("When was he born?", [], FactGraph()).query == "When was he born?"


def test_it_refers_to_what_the_user_asked_about() -> None:
    q = "How do I set up the VPN?"
    g = FactGraph()
    g.update(
        mentions(q), mentions('Leave "Connect automatically on untrusted networks" on. Open the VPN client.')
    )
    got = ConversationalRewriter(lexical).rewrite("What if it does not connect?", [q], g)
    assert got.query == "What if VPN does not connect?"


def test_year_ellipsis_swaps_the_year() -> None:
    g = FactGraph()
    g.update(mentions("Population of Norway in 2010"), [])
    rw = ConversationalRewriter(lexical)
    assert (
        rw.rewrite("And in 2020?", ["Population of Norway in 2010"], g).query
        == "Population of Norway in 2020"
    )
    assert (
        rw.rewrite("what about Sweden?", ["Population of Norway in 2010"], g).query
        == "Population of Sweden in 2010"
    )


def test_memory_store_scopes_sessions_to_their_principal() -> None:
    store = MemorySessionStore(SessionSettings())
    s = new_session(ALICE)
    s.add_turn(Turn(query="q", rewritten="q"), max_turns=5)
    store.save(s)
    assert store.load(ALICE, s.id).history() == ["q"]
    for other in (Principal(tenant="acme", user="bob"), Principal(tenant="globex", user="alice")):
        with pytest.raises(RampartError) as exc:
            store.load(other, s.id)
        assert exc.value.code is ErrorCode.NOT_FOUND
    with pytest.raises(RampartError) as bad:
        store.load(ALICE, "../../etc/passwd")
    assert bad.value.code is ErrorCode.INVALID_ARGUMENT


def test_memory_store_expires_and_bounds_sessions() -> None:
    store = MemorySessionStore(SessionSettings(ttl_s=1, max_sessions=3))
    sessions = [new_session(ALICE) for _ in range(5)]
    for s in sessions:
        store.save(s)
    kept = 0
    for s in sessions:
        try:
            store.load(ALICE, s.id)
            kept += 1
        except RampartError:
            pass
    assert kept == 3
    time.sleep(1.1)
    with pytest.raises(RampartError):
        store.load(ALICE, sessions[-1].id)


def test_turns_are_capped() -> None:
    s = new_session(ALICE)
    for i in range(30):
        s.add_turn(Turn(query=str(i), rewritten=str(i)), max_turns=20)
    assert s.history() == [str(i) for i in range(10, 30)]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        # the same head word: swap the phrase, not glue the new topic onto the old question
        ("What about sick leave?", "How many weeks of sick leave do I get?"),
        # a prepositional part conditions the same question
        ("And for the other parent?", "How many weeks of parental leave do I get for the other parent?"),
        # otherwise the most similar phrase is swapped
        ("what about bereavement?", "How many weeks of bereavement do I get?"),
        # "and" before a whole question is a connective, and a question with words of its own stands alone
        ("And how is sick leave handled?", "How is sick leave handled?"),
    ],
)
def test_follow_ups_without_entities(query: str, expected: str) -> None:
    previous = "How many weeks of parental leave do I get?"
    g = FactGraph()
    g.update(mentions(previous), mentions("Primary caregivers receive 20 weeks of paid parental leave."))
    assert ConversationalRewriter(lexical).rewrite(query, [previous], g).query == expected


def test_a_short_follow_up_still_carries_the_focus(dune: tuple[list[str], FactGraph]) -> None:
    history, graph = dune
    assert (
        ConversationalRewriter(lexical).rewrite("What is the price?", history, graph).query.endswith("Dune?")
    )


def test_names_and_months_after_and_are_ellipses_and_a_wordless_one_repeats() -> None:
    rw, g = ConversationalRewriter(lexical), FactGraph()
    # "Will" and "May" open no question here: they are what the last question is now about
    assert rw.rewrite("And Will Smith?", ["How old is Tom Cruise?"], g).query == "How old is Will Smith?"
    assert "revenue" in rw.rewrite("And May?", ["What was the revenue in April?"], g).query
    previous = "How many weeks of parental leave do I get?"
    for query in ("What about it?", "what about ??"):
        assert rw.rewrite(query, [previous], g).query == previous
