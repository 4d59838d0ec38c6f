"""The pure parts of the contradiction classifier's training: metrics, class weights, batches."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from services.models.contradiction_data import Label, NliPair
from services.models.contradiction_train import LABELS, class_weights, classification_report, epoch_batches


def test_report_counts_precision_recall_and_confusion() -> None:
    # gold: 3 SUPPORT, 2 CONTRADICT, 1 NEI
    gold = [0, 0, 0, 1, 1, 2]
    pred = [0, 0, 1, 1, 2, 2]
    r = classification_report(gold, pred, LABELS)
    assert r["pairs"] == 6 and r["accuracy"] == round(4 / 6, 4)
    s, c, n = (r["per_class"][x] for x in LABELS)
    assert (s["precision"], s["recall"], s["support"]) == (1.0, round(2 / 3, 4), 3)
    assert (c["precision"], c["recall"]) == (0.5, 0.5)
    assert (n["precision"], n["recall"], n["f1"]) == (0.5, 1.0, round(2 / 3, 4))
    assert r["macro_f1"] == round((0.8 + 0.5 + 0.6667) / 3, 4)
    assert r["confusion"]["SUPPORT"] == {"SUPPORT": 2, "CONTRADICT": 1, "NEI": 0}
    assert sum(sum(row.values()) for row in r["confusion"].values()) == 6


def test_report_of_a_missing_class_is_zero_not_an_error() -> None:
    r = classification_report([0, 0], [0, 0], LABELS)
    assert r["per_class"]["CONTRADICT"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 0}
    assert r["macro_f1"] == round(1 / 3, 4)
    assert classification_report([], [], LABELS)["accuracy"] == 0.0


def test_class_weights_are_inverse_frequency_in_label_order() -> None:
    pairs = [NliPair("e", "c", label, "t") for label in [Label.SUPPORT] * 4 + [Label.CONTRADICT] * 2]
    assert class_weights(pairs) == [6 / (3 * 4), 6 / (3 * 2), 1.0]  # NEI absent: neutral weight


@given(
    st.lists(st.integers(min_value=3, max_value=256), max_size=300), st.integers(min_value=1, max_value=40)
)
def test_epoch_batches_partition_and_are_seeded(lengths: list[int], batch: int) -> None:
    batches = epoch_batches(lengths, batch, random.Random(7))
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert all(1 <= len(b) <= batch for b in batches)
    assert batches == epoch_batches(lengths, batch, random.Random(7))


def test_epoch_batches_keep_padding_small() -> None:
    rng = random.Random(0)
    lengths = [rng.randint(10, 250) for _ in range(2000)]
    padded = sum(len(b) * max(lengths[i] for i in b) for b in epoch_batches(lengths, 16, random.Random(1)))
    shuffled = list(range(2000))
    random.Random(1).shuffle(shuffled)
    naive = sum(
        len(shuffled[i : i + 16]) * max(lengths[j] for j in shuffled[i : i + 16]) for i in range(0, 2000, 16)
    )
    assert padded < 0.7 * naive
