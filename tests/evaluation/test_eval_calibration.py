"""Temperature scaling lowers ECE on a synthetic over-confident set; conformal sets reach coverage."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from medqa.evaluation import calibration as C
from medqa.evaluation import metrics as M
from medqa.records import MedQAError


def _synthetic(n, seed, sharpen=3.0):
    """True option logits z ~ N(0, 1) (K = 4); labels drawn from softmax(z); the 'model' reports 3*z."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, 4))
    p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
    answers = [int(rng.choice(4, p=row)) for row in p]
    logits = sharpen * z
    rows = [list(r - np.log(np.exp(r).sum())) for r in logits]  # log-prob rows, like a scorer returns
    return rows, answers


def _probs(rows):
    return [[math.exp(x) for x in r] for r in rows]


def test_fitted_temperature_undoes_overconfidence_and_lowers_ece():
    val_rows, val_ans = _synthetic(3000, seed=0)
    t = C.fit_temperature(val_rows, val_ans)
    assert t == pytest.approx(3.0, rel=0.1)
    test_rows, test_ans = _synthetic(3000, seed=1)
    before = M.calibration_summary(_probs(test_rows), test_ans)
    after = M.calibration_summary(_probs(C.apply_temperature(test_rows, t)), test_ans)
    assert after["ece"] < before["ece"] / 3
    assert after["nll"] < before["nll"]
    # accuracy never moves under a temperature
    assert M.predictions(_probs(test_rows)) == M.predictions(_probs(C.apply_temperature(test_rows, t)))


def test_temperature_nll_minimum_and_ragged_rows():
    rows = [[math.log(0.9), math.log(0.1)], [math.log(0.2), math.log(0.3), math.log(0.5)]] * 15
    answers = [0, 2] * 10 + [1, 0] * 5  # some arg-max answers wrong: the optimum T is interior
    t = C.fit_temperature(rows, answers)
    assert C.T_MIN * 1.01 < t < C.T_MAX * 0.99
    for other in (t * 0.8, t * 1.25):
        assert C.temperature_nll(rows, answers, other) > C.temperature_nll(rows, answers, t)
    with pytest.raises(MedQAError, match="at least 20"):
        C.fit_temperature(rows[:4], answers[:4])


def test_save_and_load_temperature(tmp_path):
    assert C.load_temperature(tmp_path) is None and C.load_temperature(None) is None
    path = C.save_temperature(tmp_path, 1.7, {"n": 300})
    assert json.loads(path.read_text())["n"] == 300
    assert C.load_temperature(tmp_path) == 1.7
    path.write_text("{not json")
    with pytest.raises(MedQAError, match="calibration"):
        C.load_temperature(tmp_path)


def test_conformal_sets_reach_the_coverage():
    cal_rows, cal_ans = _synthetic(2000, seed=2, sharpen=1.0)
    q = C.conformal_threshold(_probs(cal_rows), cal_ans, 0.9)
    test_rows, test_ans = _synthetic(4000, seed=3, sharpen=1.0)
    rep = C.conformal_report(_probs(test_rows), test_ans, q, 0.9)
    assert 0.88 <= rep["empirical_coverage"] <= 0.93
    assert 1.0 < rep["mean_set_size"] < 4.0
    assert sum(rep["set_size_counts"].values()) == 4000


def test_conformal_set_rules():
    assert C.prediction_set([0.5, 0.3, 0.2], threshold=0.75) == [0, 1]  # keep p >= 0.25
    assert C.prediction_set([0.5, 0.3, 0.2], threshold=0.0) == [0]  # never empty: arg-max stays
    assert C.set_letters([1, 2]) == "B or C" and C.set_letters([0]) == "A"
    # too few calibration items for 99% coverage: every option is in the set
    assert C.conformal_threshold([[0.6, 0.4]] * 10, [0] * 10, 0.99) == 1.0
    # hand check: scores 1 - p_gold = .1,.2,...,1.0; n=10, level ceil(11*.8)/10 = .9 -> 9th smallest = .9
    probs = [[1 - s, s] for s in np.linspace(0.1, 1.0, 10)]
    assert C.conformal_threshold(probs, [0] * 10, 0.8) == pytest.approx(0.9)
    with pytest.raises(MedQAError, match="between 0 and 1"):
        C.conformal_threshold(probs, [0] * 10, 90)
