"""The altered-copies rule (docs/factcheck.md, rule 1): a passage that repeats an older document word for
word but for the claim it swapped is COUNTERFACTUAL; a copy, a spelling fix, a template sibling or a
rewrite is not."""

from __future__ import annotations

from services.common.types import Chunk, CopyEdit
from services.common.verdicts import Verdict
from services.factcheck.config import FactCheckSettings
from services.factcheck.detectors.altered_copy import MAX_CLAIMS, altered_copy
from services.factcheck.evidence import CheckInput
from services.retrieval.copy_overlap import copy_edit
from tests.unit.test_factcheck_stage import item, judge

ORIGINAL = (
    "The game was played on February 7, 2021, at Raymond James Stadium in Tampa, Florida, the home "
    "stadium of the Buccaneers."
)
QUERY = "Super Bowl 2021 location"


def chunk(doc: str, text: str, title: str = "") -> Chunk:
    return Chunk(chunk_id=f"{doc}#0", doc_id=doc, tenant="acme", ordinal=0, text=text, title=title)


def edit_of(new: str, old: str = ORIGINAL, titles: tuple[str, str] = ("", "")) -> CopyEdit:
    found = copy_edit(chunk("new", new, titles[0]), chunk("old", old, titles[1]))
    assert found is not None
    return found


def test_a_swapped_answer_is_an_altered_claim() -> None:
    swapped = ORIGINAL.replace("Tampa, Florida", "Glendale, Arizona")
    signal = altered_copy([edit_of(swapped)], ["super", "bowl", "2021", "location"])
    assert signal.score == 1.0 and "'tampa florida' → 'glendale arizona'" in signal.evidence
    assert "older document (old)" in signal.evidence


def test_copies_spelling_and_function_words_are_not_claims() -> None:
    assert copy_edit(chunk("new", ORIGINAL), chunk("old", ORIGINAL)) is None  # pasted whole: nothing replaced
    fixed = altered_copy([edit_of(ORIGINAL.replace("Stadium", "Stadum"))], [])
    assert fixed.score == 0.0  # a spelling, not a claim
    assert altered_copy([edit_of(ORIGINAL.replace("the home", "a home"))], []).score == 0.0


def test_another_subject_is_not_an_altered_claim() -> None:
    season = "The 2014 season of the club ended with 10 wins at Raymond James Stadium in Tampa, Florida."
    sibling = season.replace("2014", "2015").replace("10 wins", "12 wins")
    titled = edit_of(sibling, season, ("2015 season", "2014 season"))
    assert titled.heading and altered_copy([titled], []).score == 0.0  # the title names what differs
    untitled = edit_of(sibling, season)
    assert not untitled.heading and altered_copy([untitled], []).score == 1.0
    # the query names what only one of them says: two subjects it tells apart
    assert altered_copy([untitled], ["2015", "wins"]).score == 0.0
    # a query word both say is no such name ("Splatoon 2" in both, the date swapped)
    game = "Splatoon 2 was released on July 21, 2017, for the Nintendo Switch worldwide."
    redated = edit_of(game.replace("July 21, 2017", "July 2, 2016"), game)
    assert altered_copy([redated], ["splatoon", "2", "released"]).score == 1.0


def test_rewrites_and_many_changes_are_not_one_claim_swapped() -> None:
    rewritten = ORIGINAL.replace("the home stadium of", "where crowds cheered loudly all night for")
    assert altered_copy([edit_of(rewritten)], []).score == 0.0  # a clause, not an answer
    many = ORIGINAL
    for old, new in [("February 7", "March 9"), ("Raymond James", "State Farm"), ("Tampa", "Glendale")]:
        many = many.replace(old, new)
    assert MAX_CLAIMS < 3 and altered_copy([edit_of(many)], []).score == 0.0  # another record


def test_the_rule_withholds_the_altered_copy_and_keeps_its_original() -> None:
    swapped = ORIGINAL.replace("Tampa, Florida", "Glendale, Arizona")
    edits = [edit_of(swapped)]
    original: CheckInput = item("old", ORIGINAL)
    altered: CheckInput = item("new", swapped, copy_edits=edits)
    out = judge([original, altered], query=QUERY)
    assert out[0].verdict is Verdict.RELEVANT
    assert out[1].verdict is Verdict.ADVERSARIAL and out[1].reason.startswith("altered copy")
    off = judge([original, altered], FactCheckSettings(altered_copies=False), query=QUERY)
    assert not off[1].reason.startswith("altered copy")


def test_the_search_reads_copies_down_to_the_edit_cosine_only_when_a_rule_needs_them() -> None:
    s = FactCheckSettings()
    assert s.copy_overlap() == s.edit_cosine < s.copy_threshold
    assert FactCheckSettings(altered_copies=False).copy_overlap() == 0.0
    assert FactCheckSettings(altered_copies=False, copy_planting=True).copy_overlap() == s.copy_threshold
    assert FactCheckSettings(copy_min_docs=0).copy_overlap() == 0.0


def test_an_altered_copy_loaded_with_its_collection_stands_flagged() -> None:
    """Arrival order: a report's next edition, written amid the documents around it, is not planted."""
    mosque = "The Laleli Mosque stands in Fatih, Istanbul; the sultan had it built in 1763."
    swapped = mosque.replace("1763", "1863")
    around = [
        item("honest0", "The Esma Sultan Mansion is a yalı on the Bosphorus in Ortaköy."),
        item("honest1", "The palace was built for a sultan's daughter."),
        item("honest2", "Fatih is the historic peninsula of Istanbul."),
        item("honest3", "The same neighborhood holds the mansion and a mosque."),
    ]
    around = [a.model_copy(update={"arrival": 10 + i}) for i, a in enumerate(around)]

    def altered(arrival: int) -> CheckInput:
        return item("new", swapped, copy_edits=[edit_of(swapped, mosque)], arrival=arrival)

    amid = judge([altered(11), item("old", mosque, arrival=1), *around])[0]
    assert amid.verdict is Verdict.RELEVANT and "altered copy (" in amid.reason
    assert "but not planted late" in amid.reason
    late = judge([altered(500), item("old", mosque, arrival=1), *around])[0]
    assert late.verdict is Verdict.ADVERSARIAL and late.reason.startswith("altered copy")


def test_the_copies_that_altered_a_passage_do_not_make_it_a_campaign_member() -> None:
    """Two tampered copies of a genuine passage are near-copies of it; they attack it, they do not
    vouch for it as fellow members of a planted group."""
    first = ORIGINAL.replace("Tampa, Florida", "Glendale, Arizona")
    second = ORIGINAL.replace("Tampa, Florida", "Miami Gardens, Florida")
    original = item("old", ORIGINAL, copy_cosines=[0.9, 0.85, 0.3], copy_arrivals=[500, 501, 7])
    altered = [
        item(f"new{i}", text, copy_edits=[edit_of(text)], arrival=500 + i)
        for i, text in enumerate((first, second))
    ]
    out = judge([original, *altered], query=QUERY)
    assert [j.verdict for j in out] == [Verdict.RELEVANT, Verdict.ADVERSARIAL, Verdict.ADVERSARIAL]
    assert all(j.reason.startswith("altered copy") for j in out[1:])
    off = judge([original, *altered], FactCheckSettings(altered_copies=False), query=QUERY)
    assert off[0].verdict is Verdict.ADVERSARIAL and off[0].reason.startswith("planted copies")
