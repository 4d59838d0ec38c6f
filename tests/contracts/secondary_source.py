"""The ``SecondarySource`` contract (services/orchestrator/corrective/secondary.py): what CRAG's
corrective search may rely on from where it looks next, another tenant's shared corpus or a federated
endpoint. Subclass :class:`SecondarySourceContract` in the implementation's own test file and provide
``source`` and ``failing_source`` over ``CORPUS`` (tests/README.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.types import Acl, Document, Principal, ScoredChunk
from services.orchestrator.corrective.secondary import SecondarySource

READER = Principal(tenant="acme", user="alice", groups=["eng"])  # the caller; kb is not its tenant
KB = "kb"


def kb(doc_id: str, title: str, text: str, acl: Acl) -> Document:
    return Document(id=doc_id, tenant=KB, acl=acl, title=title, text=text)


# What the source holds: three pages every reader may see, three restricted to someone READER is not.
CORPUS = [
    kb(
        "kb-etna",
        "Mount Etna",
        "Mount Etna is an active stratovolcano on the east coast of Sicily. "
        "Its summit stands about 3,357 metres above sea level.",
        Acl(groups=["*"]),
    ),
    kb(
        "kb-etna-eruptions",
        "Etna eruptions",
        "Mount Etna erupts often, mostly harmlessly; in 1669 its lava reached the walls of Catania.",
        Acl(groups=["*"]),
    ),
    kb(
        "kb-etna-wine",
        "Etna wine",
        "Vineyards on the slopes of Mount Etna grow Nerello Mascalese grapes in volcanic soil.",
        Acl(groups=["*"]),
    ),
    kb(
        "kb-etna-survey",
        "Mount Etna survey (restricted)",
        "Restricted survey of Mount Etna: summit height 3,357 metres, magma chamber pressure rising.",
        Acl(groups=["geology"]),
    ),
    kb(
        "kb-etna-carol",
        "Carol's Etna notes",
        "Private notes on Mount Etna's summit height of 3,357 metres and Carol's hiking plan.",
        Acl(users=["carol"]),
    ),
    kb(
        "kb-etna-service",
        "Etna service memo",
        "Service memo: Mount Etna summit height monitoring, 3,357 metres, internal only.",
        Acl(users=["rampart-secondary"]),  # the tenant source's service user: naming it grants nothing
    ),
]
SHARED = {"kb-etna", "kb-etna-eruptions", "kb-etna-wine"}  # what READER may read
HIDDEN = {d.id for d in CORPUS} - SHARED


def doc_ids(hits: Sequence[ScoredChunk]) -> list[str]:
    return [h.chunk.doc_id for h in hits]


class SecondarySourceContract:
    """Every ``SecondarySource`` keeps these promises: a short ``name`` that never holds a credential,
    a ``vetted`` flag, at most ``top_k`` results best first, only what the principal may read, and
    ``RampartError(UNAVAILABLE)`` when the source fails (the stage degrades to the primary results).

    Provide ``source`` (the implementation over ``CORPUS``), ``failing_source`` (the same kind of
    source whose backend is down) and, when it is configured with secrets, ``credentials``.
    """

    @pytest.fixture()
    def source(self) -> SecondarySource:
        raise NotImplementedError(
            f"{type(self).__name__} must provide the source fixture: the secondary source under test, "
            "holding tests.contracts.secondary_source.CORPUS (tests/README.md)"
        )

    @pytest.fixture()
    def failing_source(self) -> SecondarySource:
        raise NotImplementedError(
            f"{type(self).__name__} must provide the failing_source fixture: a source of the same kind "
            "whose backend is down (tests/README.md)"
        )

    @pytest.fixture()
    def credentials(self) -> Sequence[str]:
        """Secrets the ``source`` was configured with (none by default)."""
        return ()

    def test_name_is_a_short_label_without_credentials(
        self, source: SecondarySource, credentials: Sequence[str]
    ) -> None:
        name = source.name
        assert isinstance(name, str) and 0 < len(name) <= 300 and name == name.strip()
        assert not any(secret in name for secret in credentials), name
        assert isinstance(source.vetted, bool)

    def test_at_most_top_k_results_best_first(self, source: SecondarySource) -> None:
        every = source.search("Mount Etna", READER, 10)
        assert set(doc_ids(every)) == SHARED and len(every) == len(SHARED)
        best = source.search("Mount Etna", READER, 2)
        assert doc_ids(best) == doc_ids(every)[:2]
        assert len(source.search("Mount Etna", READER, 1)) == 1
        for hit in every:
            assert isinstance(hit, ScoredChunk) and hit.chunk.text and math.isfinite(hit.fused)

    def test_only_what_the_principal_may_read(self, source: SecondarySource) -> None:
        seen: set[str] = set()
        for query in [
            "Mount Etna summit height",
            "restricted magma survey",
            "Carol private notes hiking",
            "service memo monitoring",
            "alice",
        ]:
            seen |= set(doc_ids(source.search(query, READER, 10)))
        assert seen == SHARED  # found, and nothing restricted to a group or a user
        assert not seen & HIDDEN

    def test_a_failing_source_is_unavailable(self, failing_source: SecondarySource) -> None:
        with pytest.raises(RampartError) as exc:
            failing_source.search("Mount Etna", READER, 5)
        assert exc.value.code is ErrorCode.UNAVAILABLE, exc.value.message
