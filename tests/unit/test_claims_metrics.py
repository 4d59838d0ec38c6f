"""The pure figures of ``rampart eval claims``: gold labels, the confusion matrix, precision/recall."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.errors import ErrorCode, RampartError
from services.common.verdicts import Verdict
from services.evaluation.claims import (
    CONTRADICT,
    NEI,
    SUPPORT,
    ClaimsRun,
    confusion_matrix,
    gold_label,
    load_claims,
    precision_recall,
    summarize,
)
from services.evaluation.metrics import nearest_rank

R, IRR, A, C = Verdict.RELEVANT, Verdict.IRRELEVANT, Verdict.ADVERSARIAL, Verdict.COUNTERFACTUAL


def test_gold_label_takes_the_majority_and_skips_ties() -> None:
    assert gold_label([{"label": SUPPORT}]) == SUPPORT
    assert gold_label([{"label": CONTRADICT}, {"label": CONTRADICT}, {"label": SUPPORT}]) == CONTRADICT
    assert gold_label([{"label": SUPPORT}, {"label": CONTRADICT}]) is None
    assert gold_label([]) is None


def test_confusion_matrix_has_every_cell() -> None:
    m = confusion_matrix([(SUPPORT, R), (SUPPORT, R), (CONTRADICT, C), (NEI, IRR)])
    assert set(m) == {SUPPORT, CONTRADICT, NEI}
    assert all(set(row) == {v.value for v in Verdict} for row in m.values())
    assert m[SUPPORT] == {"relevant": 2, "irrelevant": 0, "adversarial": 0, "counterfactual": 0}
    assert m[CONTRADICT]["counterfactual"] == 1 and m[NEI]["irrelevant"] == 1


def test_precision_recall_on_a_hand_made_confusion() -> None:
    pairs = (
        [(SUPPORT, R)] * 6
        + [(SUPPORT, IRR)] * 2
        + [(SUPPORT, C)] * 2
        + [(CONTRADICT, R)] * 3
        + [(CONTRADICT, C)] * 1
        + [(CONTRADICT, A)] * 1
        + [(NEI, R)] * 7  # NEI is not scored: must not change precision
        + [(NEI, C)] * 4
    )
    m = confusion_matrix(pairs)
    rel = precision_recall(m, Verdict.RELEVANT)
    assert rel == {
        "precision": round(6 / 9, 4),
        "recall": 0.6,
        "true_positives": 6,
        "predicted": 9,
        "positives": 10,
    }
    cf = precision_recall(m, Verdict.COUNTERFACTUAL)
    assert cf == {
        "precision": round(1 / 3, 4),
        "recall": 0.2,
        "true_positives": 1,
        "predicted": 3,
        "positives": 5,
    }


def test_empty_inputs_give_zeros_not_errors() -> None:
    m = confusion_matrix([])
    for verdict in (Verdict.RELEVANT, Verdict.COUNTERFACTUAL):
        assert precision_recall(m, verdict) == {
            "precision": 0.0,
            "recall": 0.0,
            "true_positives": 0,
            "predicted": 0,
            "positives": 0,
        }
        assert precision_recall({}, verdict)["recall"] == 0.0
    assert nearest_rank([], 0.5) == 0.0
    s = summarize(ClaimsRun(), claims=0, ties=0)
    assert s["documents_scored"] == 0 and s["latency_ms_p95"] == 0.0
    assert s["gold_counts"] == {SUPPORT: 0, CONTRADICT: 0, NEI: 0}


def test_percentile_is_nearest_rank() -> None:
    xs = [float(x) for x in range(1, 101)]
    assert (
        nearest_rank(xs, 0.5) == 51.0 and nearest_rank(xs, 0.95) == 96.0 and nearest_rank([3.0], 0.95) == 3.0
    )


def test_test_split_is_refused_before_reading() -> None:
    with pytest.raises(RampartError) as err:
        load_claims(Path("/nonexistent"), "test")
    assert err.value.code is ErrorCode.INVALID_ARGUMENT and "--split dev" in err.value.message
