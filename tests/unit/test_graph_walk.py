"""The graph's walk on hand-made graphs: a bridge passage two hops out is reached only with depth 2,
several seeds outrank one, hubs are skipped, and the walk stays within its bounds."""

from __future__ import annotations

from collections.abc import Sequence

from services.retrieval.graph.config import GraphSettings
from services.retrieval.graph.walk import walk

# passage -> entities: 1 names the film and its director; 2 is the director's own page (no film);
# 3 names the film only; 9 is unrelated
MENTIONS = {
    1: ["forbidden ground", "jane roe"],
    2: ["jane roe", "ohio"],
    3: ["forbidden ground"],
    9: ["ohio"],
}


def postings(keys: Sequence[str], mentions: dict[int, list[str]] = MENTIONS) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for cid, ents in sorted(mentions.items()):
        for k in ents:
            if k in keys:
                out.setdefault(k, []).append(cid)
    return out


def entities_of(cids: Sequence[int]) -> dict[int, list[str]]:
    return {c: MENTIONS[c] for c in cids if c in MENTIONS}


def test_depth_two_reaches_the_bridge_passage() -> None:
    seeds = postings(["forbidden ground"])
    one = walk(seeds, postings, entities_of, 1, GraphSettings())
    two = walk(seeds, postings, entities_of, 2, GraphSettings())
    three = walk(seeds, postings, entities_of, 3, GraphSettings())
    assert {c for c, _ in one.scores} == {1, 3}
    assert {c for c, _ in two.scores} == {1, 2, 3}  # film -> its director -> the director's page
    assert {c for c, _ in three.scores} == {1, 2, 3, 9}
    got = dict(three.scores)
    assert got[1] > got[2] > got[9]  # nearer the seed ranks higher
    assert (one.hops, two.hops, three.hops) == (1, 2, 3)


def test_a_passage_two_seeds_reach_outranks_one_seed_reaches() -> None:
    seeds = postings(["forbidden ground", "jane roe"])
    got = dict(walk(seeds, postings, entities_of, 1, GraphSettings()).scores)
    assert got[1] > got[3] and got[1] > got[2]


def test_hubs_are_neither_seeds_nor_bridges() -> None:
    mentions = {i: ["common"] for i in range(10, 20)} | {1: ["rare", "common"], 2: ["common"]}

    def post(keys: Sequence[str]) -> dict[str, list[int]]:
        return postings(keys, mentions)

    def ents(cids: Sequence[int]) -> dict[int, list[str]]:
        return {c: mentions[c] for c in cids}

    s = GraphSettings(hub_postings=5)
    only_hub = walk(post(["common"]), post, ents, 2, s)
    assert only_hub.scores == [] and only_hub.hubs == ["common"]
    through = walk(post(["rare"]), post, ents, 3, s)
    assert [c for c, _ in through.scores] == [1]  # "common" is a hub: no passage beyond it


def test_the_walk_stops_at_max_passages() -> None:
    mentions = {i: ["seed", f"e{i}"] for i in range(50)} | {100 + i: [f"e{i}"] for i in range(50)}

    def post(keys: Sequence[str]) -> dict[str, list[int]]:
        return postings(keys, mentions)

    def ents(cids: Sequence[int]) -> dict[int, list[str]]:
        return {c: mentions[c] for c in cids}

    s = GraphSettings(max_passages=60, hub_postings=100)
    result = walk(post(["seed"]), post, ents, 3, s)
    assert result.truncated and len(result.scores) <= 60


def test_no_seed_no_walk() -> None:
    result = walk({}, postings, entities_of, 2, GraphSettings())
    assert result.scores == [] and result.seeds == []
