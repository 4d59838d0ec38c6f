"""The knowledge graph: HyPA's third retrieval stream (docs/graph.md).

Entities of each chunk at ingest (:mod:`.entities`, spaCy from its wheel), the index reads a walk needs
(:mod:`.reads`, ACL-scoped), the personalised-PageRank walk (:mod:`.walk`) and the stream that links a
query and hands fusion its list (:mod:`.stream`); settings in :mod:`.config`.
"""
