"""Metrics over per-item probability rows: accuracy (+ bootstrap CI), per-subject/macro accuracy,
NLL, Brier, ECE with bin statistics, answer-letter confusion, and paired run comparison.

Inputs are plain Python/numpy: ``probs`` is a list of rows (row length K = the item's option count,
which may differ between items), ``answers`` are 0-based gold indices.  Items without a gold answer
must be filtered out by the caller.
"""
from __future__ import annotations

import math
from collections import Counter, defaultdict
from typing import Sequence

import numpy as np

from ..records import LETTERS, MedQAError

ECE_BINS = 15
_EPS = 1e-12


def _check(probs: Sequence[Sequence[float]], answers: Sequence[int]) -> None:
    if len(probs) != len(answers):
        raise MedQAError(f"{len(probs)} probability rows but {len(answers)} answers")
    if not len(probs):
        raise MedQAError("no labelled items to compute metrics on (do the items have answers?)")


def predictions(probs: Sequence[Sequence[float]]) -> list[int]:
    """Arg-max per row; ties go to the earliest letter (like ``numpy.argmax``)."""
    return [int(np.argmax(p)) for p in probs]


def accuracy(correct: Sequence[bool]) -> float:
    return float(np.mean(correct)) if len(correct) else float("nan")


def bootstrap_ci(correct: Sequence[bool], n_boot: int = 2000, level: float = 0.95, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``correct`` (resampling items with replacement)."""
    x = np.asarray(correct, dtype=float)
    if x.size == 0:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(n_boot, x.size))].mean(axis=1)  # (n_boot,)
    a = (1 - level) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def nll(probs, answers) -> float:
    """Mean negative log-likelihood of the gold option (natural log)."""
    _check(probs, answers)
    return float(np.mean([-math.log(max(p[a], _EPS)) for p, a in zip(probs, answers)]))


def brier(probs, answers) -> float:
    """Multi-class Brier score: mean over items of sum_k (p_k - y_k)^2 (0 = perfect, 2 = worst)."""
    _check(probs, answers)
    total = 0.0
    for p, a in zip(probs, answers):
        y = np.zeros(len(p))
        y[a] = 1.0
        total += float(np.sum((np.asarray(p) - y) ** 2))
    return total / len(probs)


def ece(confidences: Sequence[float], correct: Sequence[bool], n_bins: int = ECE_BINS) -> tuple[float, list[dict]]:
    """Expected calibration error with equal-width bins on (0, 1] (Guo et al. 2017).

    Bin b holds confidences in ``(b/n, (b+1)/n]`` (the first bin also takes 0).  Returns the ECE and
    per-bin ``{lo, hi, count, confidence, accuracy}`` (confidence/accuracy are None for empty bins).
    """
    conf = np.asarray(confidences, dtype=float)
    corr = np.asarray(correct, dtype=float)
    if conf.size == 0:
        return float("nan"), []
    idx = np.clip(np.ceil(conf * n_bins).astype(int) - 1, 0, n_bins - 1)  # (N,)
    total, bins = 0.0, []
    for b in range(n_bins):
        sel = idx == b
        n = int(sel.sum())
        c = float(conf[sel].mean()) if n else None
        a = float(corr[sel].mean()) if n else None
        if n:
            total += n / conf.size * abs(c - a)
        bins.append({"lo": b / n_bins, "hi": (b + 1) / n_bins, "count": n, "confidence": c, "accuracy": a})
    return float(total), bins


def per_subject(subjects: Sequence[str], correct: Sequence[bool]) -> dict[str, dict]:
    """``{subject: {n, accuracy}}`` sorted by subject; a missing subject is reported as ``(none)``."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for s, c in zip(subjects, correct):
        groups[s or "(none)"].append(bool(c))
    return {s: {"n": len(v), "accuracy": accuracy(v)} for s, v in sorted(groups.items())}


def macro_accuracy(subject_stats: dict[str, dict]) -> float:
    """Unweighted mean of per-subject accuracies (each subject counts once, whatever its size)."""
    return float(np.mean([v["accuracy"] for v in subject_stats.values()])) if subject_stats else float("nan")


def letter_confusion(answers: Sequence[int], preds: Sequence[int], k_max: int | None = None) -> dict:
    """Gold-letter x predicted-letter counts plus both marginals: does the model just pick A?

    ``pred_share_max`` is the largest share of predictions on one letter; with balanced gold letters
    a value far above ``gold_share_max`` means a letter bias.
    """
    k = k_max or (max(list(answers) + list(preds)) + 1)
    letters = LETTERS[:k]
    matrix = [[0] * k for _ in range(k)]
    for a, p in zip(answers, preds):
        matrix[a][p] += 1
    n = max(len(preds), 1)
    pred_counts, gold_counts = Counter(preds), Counter(answers)
    pred_dist = {L: pred_counts.get(i, 0) / n for i, L in enumerate(letters)}
    gold_dist = {L: gold_counts.get(i, 0) / n for i, L in enumerate(letters)}
    return {"letters": letters, "matrix": matrix, "pred_distribution": pred_dist, "gold_distribution": gold_dist,
            "pred_share_max": max(pred_dist.values()), "gold_share_max": max(gold_dist.values())}


def compute_metrics(probs, answers, subjects: Sequence[str] | None = None, n_boot: int = 2000,
                    seed: int = 0) -> dict:
    """All single-run metrics for labelled items."""
    _check(probs, answers)
    preds = predictions(probs)
    correct = [p == a for p, a in zip(preds, answers)]
    conf = [float(max(p)) for p in probs]
    lo, hi = bootstrap_ci(correct, n_boot=n_boot, seed=seed)
    subj = per_subject(subjects or [""] * len(probs), correct)
    e, bins = ece(conf, correct)
    return {
        "n": len(probs), "accuracy": accuracy(correct), "accuracy_ci95": [lo, hi],
        "macro_accuracy": macro_accuracy(subj), "per_subject": subj,
        "nll": nll(probs, answers), "brier": brier(probs, answers), "ece": e, "ece_bins": bins,
        "mean_confidence": float(np.mean(conf)),
        "letters": letter_confusion(answers, preds, k_max=max(len(p) for p in probs)),
    }


def calibration_summary(probs, answers) -> dict:
    """The temperature-dependent metrics only (accuracy does not change with temperature)."""
    preds = predictions(probs)
    correct = [p == a for p, a in zip(preds, answers)]
    e, bins = ece([max(p) for p in probs], correct)
    return {"nll": nll(probs, answers), "brier": brier(probs, answers), "ece": e, "ece_bins": bins}


def mcnemar(a_correct: Sequence[bool], b_correct: Sequence[bool]) -> dict:
    """McNemar's test on paired correctness: exact binomial and chi-square with continuity correction."""
    from scipy import stats

    a, b = np.asarray(a_correct, bool), np.asarray(b_correct, bool)
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    n = only_a + only_b
    if n == 0:
        return {"only_a": 0, "only_b": 0, "p_exact": 1.0, "chi2": 0.0, "p_chi2": 1.0}
    p_exact = float(stats.binomtest(min(only_a, only_b), n=n, p=0.5).pvalue)
    chi2 = (abs(only_a - only_b) - 1) ** 2 / n
    return {"only_a": only_a, "only_b": only_b, "p_exact": min(p_exact, 1.0), "chi2": float(chi2),
            "p_chi2": float(stats.chi2.sf(chi2, df=1))}


def paired_bootstrap(a_correct, b_correct, n_boot: int = 10000, seed: int = 0) -> dict:
    """Bootstrap of accuracy(B) - accuracy(A) resampling *items* (both runs together): 95% CI and a
    two-sided p-value (twice the share of resamples on the other side of zero)."""
    a, b = np.asarray(a_correct, float), np.asarray(b_correct, float)
    d = b - a  # (N,)
    rng = np.random.default_rng(seed)
    diffs = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(axis=1)  # (n_boot,)
    p = 2 * min(float((diffs <= 0).mean()), float((diffs >= 0).mean()))
    return {"diff": float(d.mean()), "ci95": [float(np.quantile(diffs, 0.025)), float(np.quantile(diffs, 0.975))],
            "p_value": min(p, 1.0)}


def paired_comparison(ids: Sequence[str], a_correct, b_correct, n_boot: int = 10000, seed: int = 0) -> dict:
    """Run B vs run A on the same items: accuracies, McNemar, paired bootstrap and flipped item ids."""
    if not (len(ids) == len(a_correct) == len(b_correct)) or not len(ids):
        raise MedQAError("paired comparison needs the same, non-empty list of items in both runs")
    fixed = [i for i, x, y in zip(ids, a_correct, b_correct) if not x and y]
    broken = [i for i, x, y in zip(ids, a_correct, b_correct) if x and not y]
    return {"n": len(ids), "accuracy_a": accuracy(a_correct), "accuracy_b": accuracy(b_correct),
            "mcnemar": mcnemar(a_correct, b_correct), "bootstrap": paired_bootstrap(a_correct, b_correct, n_boot, seed),
            "flipped_to_correct": fixed, "flipped_to_wrong": broken}
