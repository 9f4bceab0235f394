"""Temperature scaling and split-conformal prediction sets.

Temperature: one scalar T divides the option logits (our log-prob rows are valid logits), fitted by
minimising NLL on a *validation* split, saved as ``calibration.json`` next to the adapter, and applied
at evaluation and inference.  T > 1 softens an over-confident model; the arg-max (accuracy) never moves.

Conformal (split, LAC score ``1 - p_gold``): on calibration items we find the threshold q such that a
set ``{k : p_k >= 1 - q}`` contains the gold answer with probability >= the chosen coverage on new
items from the same distribution.  A clinician then sees "B or C" instead of a confident wrong "B".
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Sequence

import numpy as np

from ..records import LETTERS, MedQAError
from ..scoring.base import softmax_rows
from ..utils.io import atomic_write_json

CALIBRATION_FILE = "calibration.json"
T_MIN, T_MAX = 0.05, 20.0


def _padded(rows: Sequence[Sequence[float]]) -> tuple[np.ndarray, np.ndarray]:
    """Ragged rows -> ``(N, K_max)`` array and validity mask (options beyond an item's K are invalid)."""
    k = max(len(r) for r in rows)
    z = np.zeros((len(rows), k))
    valid = np.zeros((len(rows), k), bool)
    for i, r in enumerate(rows):
        z[i, : len(r)] = r
        valid[i, : len(r)] = True
    return z, valid


def temperature_nll(rows, answers, temperature: float) -> float:
    """Mean NLL of the gold option after dividing logits by ``temperature``."""
    z, valid = _padded(rows)
    s = np.where(valid, z / temperature, -np.inf)  # (N, K_max)
    m = s.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(s - m).sum(axis=1))  # (N,)
    gold = s[np.arange(len(answers)), np.asarray(answers)]
    return float(np.mean(lse - gold))


def fit_temperature(rows: Sequence[Sequence[float]], answers: Sequence[int]) -> float:
    """Temperature minimising validation NLL, searched on log T in [0.05, 20] (NLL is smooth there)."""
    from scipy.optimize import minimize_scalar

    if len(rows) != len(answers) or not rows:
        raise MedQAError("temperature fitting needs labelled validation items (one answer per row)")
    if len(rows) < 20:
        raise MedQAError(f"only {len(rows)} validation items; use at least 20 (100+ recommended) to fit a temperature")
    res = minimize_scalar(lambda lt: temperature_nll(rows, answers, math.exp(lt)),
                          bounds=(math.log(T_MIN), math.log(T_MAX)), method="bounded", options={"xatol": 1e-4})
    return float(math.exp(res.x))


def apply_temperature(rows: Sequence[Sequence[float]], temperature: float | None) -> list[list[float]]:
    """Log-prob rows re-normalised at ``temperature`` (None or 1.0 returns them unchanged)."""
    if not temperature or temperature == 1.0:
        return [list(r) for r in rows]
    if temperature <= 0:
        raise MedQAError(f"temperature must be positive (got {temperature})")
    return [softmax_rows(r, temperature) for r in rows]


def save_temperature(directory: str | Path, temperature: float, info: dict | None = None) -> Path:
    """Write ``calibration.json`` (atomically) into ``directory`` — normally the adapter folder."""
    path = Path(directory) / CALIBRATION_FILE
    atomic_write_json(path, {"temperature": float(temperature), **(info or {})})
    return path


def load_calibration(directory: str | Path | None) -> dict | None:
    """The calibration record in ``directory`` (an adapter or run folder), or None if there is none."""
    if not directory:
        return None
    path = Path(directory) / CALIBRATION_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        t = float(data["temperature"])
    except (ValueError, KeyError, TypeError) as e:
        raise MedQAError(f"{path} is not a valid calibration file ({e}); delete it or re-run with --calibrate-on") from e
    if not (T_MIN / 10 < t < T_MAX * 10):
        raise MedQAError(f"{path}: temperature {t} is implausible; delete the file or re-run with --calibrate-on")
    return data


def load_temperature(directory: str | Path | None) -> float | None:
    data = load_calibration(directory)
    return None if data is None else float(data["temperature"])


def conformal_threshold(probs: Sequence[Sequence[float]], answers: Sequence[int], coverage: float) -> float:
    """Split-conformal threshold q on the LAC score ``1 - p_gold`` (finite-sample corrected quantile).

    Returns q; the prediction set of a new item is ``{k : p_k >= 1 - q}``.  With too few calibration
    items for the requested coverage, q = 1 (every option is in the set) — honest, if unhelpful.
    """
    if not 0 < coverage < 1:
        raise MedQAError(f"--conformal coverage must be between 0 and 1, e.g. 0.9 (got {coverage})")
    if len(probs) != len(answers) or not probs:
        raise MedQAError("conformal calibration needs labelled items")
    scores = np.sort([1.0 - p[a] for p, a in zip(probs, answers)])  # (N,)
    k = math.ceil((scores.size + 1) * coverage - 1e-9)  # the k-th smallest score (1-based); -1e-9: float noise
    return 1.0 if k > scores.size else float(scores[k - 1])


def prediction_set(probs: Sequence[float], threshold: float) -> list[int]:
    """Options whose probability is at least ``1 - threshold``; never empty (the arg-max is always in)."""
    top = int(np.argmax(probs))
    keep = [k for k, p in enumerate(probs) if p >= 1.0 - threshold - 1e-12]
    return sorted(set(keep) | {top})


def set_letters(indices: Sequence[int]) -> str:
    """``[1, 2]`` -> ``"B or C"``."""
    letters = [LETTERS[i] for i in indices]
    return letters[0] if len(letters) == 1 else ", ".join(letters[:-1]) + " or " + letters[-1]


def conformal_report(probs, answers, threshold: float, coverage: float) -> dict:
    """Empirical coverage and set-size statistics of conformal sets on (test) items."""
    sets = [prediction_set(p, threshold) for p in probs]
    hits = [a in s for s, a in zip(sets, answers)]
    sizes = [len(s) for s in sets]
    return {"target_coverage": coverage, "threshold": threshold, "empirical_coverage": float(np.mean(hits)),
            "mean_set_size": float(np.mean(sizes)), "singleton_rate": float(np.mean([z == 1 for z in sizes])),
            "set_size_counts": {str(k): sizes.count(k) for k in sorted(set(sizes))}}
