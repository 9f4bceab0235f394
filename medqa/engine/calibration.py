"""Reading a saved calibration (temperature, conformal threshold) for the engine.

``calibration.json`` is written by ``medqa eval --calibrate-on`` into the adapter folder (see
:mod:`medqa.evaluation.calibration`); ``medqa export`` may carry it into a merged model folder.
"""
from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def saved_calibration(model: str, adapter: str | None) -> dict:
    """calibration.json from the adapter folder, else from a local (merged) model folder; {} if none."""
    from ..evaluation.calibration import load_calibration

    for folder in (adapter, model):
        if folder and Path(folder).expanduser().is_dir():
            data = load_calibration(Path(folder).expanduser())
            if data is not None:
                log.info("using calibration from %s (temperature %.3f)", folder, data["temperature"])
                return data
    return {}


def saved_qhat(saved: dict) -> float | None:
    """The conformal threshold in a calibration record: top-level, or per task (the largest = most cautious)."""
    if "threshold" in saved:
        return float(saved["threshold"])
    per_task = [c.get("threshold") for c in (saved.get("conformal") or {}).values() if isinstance(c, dict)]
    per_task = [float(t) for t in per_task if t is not None]
    return max(per_task) if per_task else None
