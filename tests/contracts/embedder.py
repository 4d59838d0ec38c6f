"""The ``Embedder`` contract (services/retrieval/embedder.py): what retrieval, chunking and the
fact-check rely on from whatever turns text into vectors. One implementation today
(:class:`OnnxEmbedder`); the contract writes the promises down for the remote ones to come. Subclass
:class:`EmbedderContract` in the implementation's own test file and provide ``embedder``
(tests/README.md).
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from services.retrieval.embedder import Embedder

TEXTS = [
    "A man is playing a guitar.",
    "Vitamin D supplementation reduces the risk of respiratory infections in elderly patients.",
    "",
    "What is the capital of France?",
    "Der schnelle braune Fuchs springt über den faulen Hund. Café, naïve, résumé!",
    "东京是日本的首都。",
    "ok",
    "The stock market fell sharply on Tuesday after the central bank raised interest rates.",
]


class EmbedderContract:
    """Every ``Embedder`` keeps these promises: it is an ``Embedder`` (runtime-checkable) with a
    positive ``dim`` and a non-empty, stable ``model_id``; ``embed`` returns float32 of shape
    ``(len(texts), dim)``, each row L2-normalised (inner product == cosine), empty text included;
    no input gives shape ``(0, dim)``; batching is invisible: a text's vector does not depend on
    its batch, its position in it or its duplicates.

    Provide ``embedder``: the implementation under test, serving its shipped model.
    """

    @pytest.fixture()
    def embedder(self) -> Embedder:
        raise NotImplementedError(
            f"{type(self).__name__} must provide the embedder fixture: the implementation under test "
            "(tests/README.md)"
        )

    def test_is_an_embedder_with_a_dim_and_a_stable_model_id(self, embedder: Embedder) -> None:
        assert isinstance(embedder, Embedder)
        assert embedder.dim > 0
        assert embedder.model_id and embedder.model_id == embedder.model_id

    def test_vectors_are_normalised_float32_of_dim(self, embedder: Embedder) -> None:
        got = embedder.embed(TEXTS)
        assert got.shape == (len(TEXTS), embedder.dim) and got.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)

    def test_no_input_is_an_empty_matrix(self, embedder: Embedder) -> None:
        empty = embedder.embed([])
        assert empty.shape == (0, embedder.dim) and empty.dtype == np.float32

    def test_batching_changes_no_vector(self, embedder: Embedder) -> None:
        base = embedder.embed(TEXTS)
        order = list(range(len(TEXTS)))
        random.Random(7).shuffle(order)
        np.testing.assert_allclose(embedder.embed([TEXTS[i] for i in order]), base[order], atol=1e-5)
        one_by_one = np.vstack([embedder.embed([t]) for t in TEXTS])
        np.testing.assert_allclose(one_by_one, base, atol=1e-5)
        dup = embedder.embed(["same text", "other", "same text"])
        np.testing.assert_allclose(dup[0], dup[2], atol=1e-6)
