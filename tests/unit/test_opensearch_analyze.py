"""The OpenSearch index's ``_analyze`` batching (services/retrieval/opensearch_index.py): a batch of
texts goes in as few requests as the node's token limit allows (the counts themselves are checked on
a real node: tests/integration/test_opensearch_index.py)."""

from __future__ import annotations

from services.retrieval.opensearch_index import analyze_groups


def test_analyze_groups_stay_under_the_token_limit() -> None:
    texts = ["a b c", "d e", "f_g h-i", "one two three four five six", "x"]
    groups = analyze_groups(texts, 5)
    assert [t for g in groups for t in g] == texts  # in order, none lost
    assert groups == [["a b c", "d e"], ["f_g h-i"], ["one two three four five six"], ["x"]]
    assert analyze_groups([], 5) == []
