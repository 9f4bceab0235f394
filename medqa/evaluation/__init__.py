"""Evaluation: metrics, temperature calibration + conformal sets, run folders and reports.

Importing this package is cheap; torch is only needed by the scorer that produces the log-prob rows.
"""
from .calibration import (  # noqa: F401
    apply_temperature, conformal_threshold, fit_temperature, load_calibration, load_temperature,
    prediction_set, save_temperature,
)
from .metrics import compute_metrics, ece, paired_comparison  # noqa: F401
from .runner import calibrate, compare_runs, evaluate, evaluate_tasks, summarize  # noqa: F401
