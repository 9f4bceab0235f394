"""Metrics against hand-computed values."""
from __future__ import annotations

import math

import pytest
from scipy import stats

from medqa.evaluation import metrics as M
from medqa.records import MedQAError

PROBS = [[0.7, 0.2, 0.1], [0.4, 0.6], [0.25, 0.25, 0.5, 0.0]]
ANSWERS = [0, 0, 2]  # predictions 0, 1, 2 -> correct, wrong, correct


def test_nll_brier_accuracy_by_hand():
    assert M.predictions(PROBS) == [0, 1, 2]
    assert M.nll(PROBS, ANSWERS) == pytest.approx(-(math.log(0.7) + math.log(0.4) + math.log(0.5)) / 3)
    # row 1: .3^2+.2^2+.1^2 = .14; row 2: .6^2+.6^2 = .72; row 3: .75^2... no: .25^2+.25^2+.5^2+0 = .375
    assert M.brier(PROBS, ANSWERS) == pytest.approx((0.14 + 0.72 + 0.375) / 3)
    m = M.compute_metrics(PROBS, ANSWERS, ["x", "x", "y"], n_boot=200)
    assert m["accuracy"] == pytest.approx(2 / 3)
    assert m["per_subject"] == {"x": {"n": 2, "accuracy": 0.5}, "y": {"n": 1, "accuracy": 1.0}}
    assert m["macro_accuracy"] == pytest.approx(0.75)
    assert m["mean_confidence"] == pytest.approx((0.7 + 0.6 + 0.5) / 3)


def test_ece_15_bins_by_hand():
    # confidences .7, .6, .5 fall in bins (10/15, 11/15], (8/15, 9/15], (7/15, 8/15]: one item each
    e, bins = M.ece([0.7, 0.6, 0.5], [True, False, True])
    assert e == pytest.approx((0.3 + 0.6 + 0.5) / 3)
    assert len(bins) == 15 and sum(b["count"] for b in bins) == 3
    assert [i for i, b in enumerate(bins) if b["count"]] == [7, 8, 10]
    assert bins[8] == {"lo": 8 / 15, "hi": 9 / 15, "count": 1, "confidence": 0.6, "accuracy": 0.0}
    # perfectly calibrated bin: 4 items at confidence .75, 3 correct -> ECE 0
    e2, _ = M.ece([0.75] * 4, [True, True, True, False])
    assert e2 == pytest.approx(0.0)
    # confidence 1.0 goes to the last bin, 0 to the first
    _, b3 = M.ece([1.0, 0.0], [True, False])
    assert b3[-1]["count"] == 1 and b3[0]["count"] == 1


def test_bootstrap_ci():
    assert M.bootstrap_ci([True] * 50) == (1.0, 1.0)
    correct = [True] * 60 + [False] * 40
    lo, hi = M.bootstrap_ci(correct, n_boot=4000, seed=1)
    # normal approximation: .6 +- 1.96 * sqrt(.24/100) = [.504, .696]
    assert lo == pytest.approx(0.504, abs=0.02) and hi == pytest.approx(0.696, abs=0.02)
    assert M.bootstrap_ci(correct, seed=3) == M.bootstrap_ci(correct, seed=3)


def test_letter_confusion_detects_a_bias():
    lt = M.letter_confusion([0, 1, 2, 3, 0, 1, 2, 3], [0, 0, 0, 0, 0, 0, 2, 3], k_max=4)
    assert lt["matrix"][1] == [2, 0, 0, 0] and lt["matrix"][0] == [2, 0, 0, 0] and lt["matrix"][2] == [1, 0, 1, 0]
    assert lt["pred_distribution"]["A"] == 0.75 and lt["gold_distribution"]["A"] == 0.25
    assert lt["pred_share_max"] == 0.75


def test_mcnemar_and_paired_bootstrap_by_hand():
    a = [True] * 10 + [False] * 6
    b = [True] * 16  # B fixes 6 items, breaks none
    mc = M.mcnemar(a, b)
    assert (mc["only_a"], mc["only_b"]) == (0, 6)
    assert mc["p_exact"] == pytest.approx(2 * 0.5 ** 6)
    assert mc["chi2"] == pytest.approx(25 / 6)
    assert mc["p_chi2"] == pytest.approx(stats.chi2.sf(25 / 6, 1))
    pb = M.paired_bootstrap(a, b, n_boot=2000)
    assert pb["diff"] == pytest.approx(6 / 16) and pb["ci95"][0] > 0 and pb["p_value"] < 0.01
    same = M.mcnemar(a, a)
    assert same["p_exact"] == 1.0 and same["only_b"] == 0


def test_paired_comparison_lists_flips():
    ids = ["a", "b", "c", "d"]
    c = M.paired_comparison(ids, [True, True, False, False], [True, False, True, False], n_boot=100)
    assert c["flipped_to_correct"] == ["c"] and c["flipped_to_wrong"] == ["b"]
    assert c["accuracy_a"] == c["accuracy_b"] == 0.5
    assert c["mcnemar"]["p_exact"] == pytest.approx(1.0)
    with pytest.raises(MedQAError):
        M.paired_comparison([], [], [])


def test_errors_are_medqa_errors():
    with pytest.raises(MedQAError, match="answers"):
        M.nll([[0.5, 0.5]], [0, 1])
    with pytest.raises(MedQAError, match="no labelled"):
        M.compute_metrics([], [])
