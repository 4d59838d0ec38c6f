"""The linked corpus profile's extension of retrieval (docs/corpus-profiles.md).

Everything here exists for corpora whose documents name each other by title (a wiki, a handbook whose
pages cite each other by name): the link stream and back-links of hybrid search (:mod:`.stream`), the
index reads they need (:mod:`.reads`), the opening names of a result's near-copies that the
fact-check's template-family rule reads (:mod:`.leads`), their options (:mod:`.options`) and their
gRPC service and wire messages (``proto/rampart/links/v1``; :mod:`.link_servicer`, :mod:`.wire`).

The core (``SearchIndex``, ``SearchParams``' own fields, ``common/v1`` and ``retrieval/v1``) knows
none of it: a search carries a :class:`~.options.LinkOptions`, empty for a tenant of the generic
profile, and nothing in this package runs for an empty one.
"""
