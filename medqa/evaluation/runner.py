"""Run a scorer over items into a run folder; calibrate; evaluate several tasks; compare two runs.

Run folder layout (one task)::

    run.json           what produced the predictions (scorer, style) — checked on --resume
    predictions.jsonl  one line per item: raw log-probs, probabilities (at the run temperature),
                       prediction, correct, confidence [, conformal set]
    metrics.json       written atomically at the end
    report.md, reliability.png, subjects.png

Predictions are appended (fsync'd) chunk by chunk, so an interrupted run loses at most one chunk and
``resume=True`` re-scores only the missing item ids.  Raw log-probs are stored, so probabilities and
metrics can always be recomputed at another temperature without re-running the model.
"""
from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Sequence

from ..records import LETTERS, MCQItem, MedQAError
from ..utils.io import JsonlAppender, atomic_write_json, read_jsonl_complete, write_jsonl
from . import calibration as cal
from . import metrics as M

log = logging.getLogger(__name__)

PRED_FILE, METRICS_FILE, RUN_FILE = "predictions.jsonl", "metrics.json", "run.json"


def _fingerprint(scorer, task: str) -> dict:
    return {"scorer": getattr(scorer, "name", type(scorer).__name__), "style": getattr(scorer, "style", None), "task": task}


def _check_resume(out: Path, fp: dict, resume: bool) -> list[dict]:
    """Predictions already on disk (resume) — or an error if the folder is in use and resume is off."""
    pred = out / PRED_FILE
    if not resume:
        if pred.exists() and pred.stat().st_size:
            raise MedQAError(f"{out} already holds predictions; pass --resume to continue it or choose another --out")
        return []
    old_fp = _read_json(out / RUN_FILE)
    if old_fp and {k: old_fp.get(k) for k in fp} != fp:
        raise MedQAError(f"--resume: {out} was produced by {old_fp}, not {fp}; use a new --out for a different model/style")
    done = read_jsonl_complete(pred)
    write_jsonl(pred, done)  # drop a torn last line, so appends start on a clean line
    return done


def _read_json(path: Path) -> dict | None:
    import json

    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _record(item: MCQItem, raw: list[float], temperature: float | None, mass: float | None) -> dict:
    logp = cal.apply_temperature([raw], temperature)[0]
    probs = [math.exp(x) for x in logp]
    pred = max(range(len(probs)), key=probs.__getitem__)
    rec = {"id": item.id, "subject": item.subject, "n_options": len(item.options), "answer": item.answer,
           "answer_letter": item.answer_letter, "logprobs_raw": [round(x, 6) for x in raw],
           "probs": [round(p, 6) for p in probs], "pred": pred, "pred_letter": LETTERS[pred],
           "confidence": round(probs[pred], 6), "correct": None if item.answer is None else pred == item.answer}
    if mass is not None:
        rec["letter_mass"] = round(mass, 6)
    return rec


def _length_key(item: MCQItem) -> int:
    """Character length as a cheap proxy for token length: chunks of similar length pad less."""
    return len(item.question) + len(item.context) + sum(len(o) for o in item.options)


def score_items(scorer, items: Sequence[MCQItem], out: Path, *, resume: bool = False, task: str = "",
                temperature: float | None = None, chunk_size: int = 64, progress: bool = True) -> tuple[list[dict], dict]:
    """Score the items not yet in ``out/predictions.jsonl``; return records in item order and timing."""
    from tqdm.auto import tqdm

    out.mkdir(parents=True, exist_ok=True)
    fp = _fingerprint(scorer, task)
    done = {r["id"]: r for r in _check_resume(out, fp, resume)}
    atomic_write_json(out / RUN_FILE, fp)
    pending = sorted((it for it in items if it.id not in done), key=_length_key)
    bar = tqdm(total=len(items), initial=len(items) - len(pending), unit="q", desc=task or "eval",
               disable=not progress, dynamic_ncols=True)
    t0 = time.perf_counter()
    with JsonlAppender(out / PRED_FILE) as app:
        for s in range(0, len(pending), chunk_size):
            chunk = pending[s:s + chunk_size]
            rows = scorer.score(chunk)
            mass = getattr(scorer, "last_letter_mass", None) or [None] * len(chunk)
            for item, raw, m in zip(chunk, rows, mass):
                rec = _record(item, raw, temperature, m)
                app.write(rec)
                done[item.id] = rec
            bar.update(len(chunk))
    bar.close()
    secs = time.perf_counter() - t0
    timing = {"scored_now": len(pending), "resumed": len(items) - len(pending), "seconds": round(secs, 3),
              "questions_per_second": round(len(pending) / secs, 3) if pending and secs > 0 else None}
    return [done[it.id] for it in items], timing


def _rescore_records(records: list[dict], items: Sequence[MCQItem], temperature, threshold) -> list[dict]:
    """Recompute probabilities (and conformal sets) from raw log-probs at the final temperature."""
    out = []
    for rec, item in zip(records, items):
        new = _record(item, rec["logprobs_raw"], temperature, rec.get("letter_mass"))
        if threshold is not None:
            s = cal.prediction_set(new["probs"], threshold)
            new["conformal_set"], new["conformal_letters"] = s, cal.set_letters(s)
        out.append(new)
    return out


def evaluate(scorer, items: Sequence[MCQItem], out_dir: str | Path, *, resume: bool = False,
             temperature: float | None = None, conformal: dict | None = None, task: str = "",
             run_info: dict | None = None, chunk_size: int = 64, progress: bool = True, report: bool = True,
             n_boot: int = 2000) -> dict:
    """Score ``items`` into ``out_dir`` and return the metrics dict (also written to metrics.json).

    ``temperature``: apply this calibration temperature (metrics are reported at T=1 *and* at T).
    ``conformal``: ``{"coverage": 0.9, "threshold": q}`` from :func:`calibrate` — adds prediction sets.
    """
    if not items:
        raise MedQAError(f"no items to evaluate{f' for task {task}' if task else ''}")
    ids = [it.id for it in items]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise MedQAError(f"item ids must be unique (predictions are keyed by id); repeated: {', '.join(dup)}")
    out = Path(out_dir)
    records, timing = score_items(scorer, items, out, resume=resume, task=task, temperature=temperature,
                                  chunk_size=chunk_size, progress=progress)
    threshold = conformal["threshold"] if conformal else None
    records = _rescore_records(records, items, temperature, threshold)
    write_jsonl(out / PRED_FILE, records)  # final copy in item order, at the final temperature
    metrics = summarize(records, task=task, temperature=temperature, n_boot=n_boot)
    if conformal:
        lab = [r for r in records if r["answer"] is not None]
        metrics["conformal"] = {**cal.conformal_report([r["probs"] for r in lab], [r["answer"] for r in lab],
                                                       threshold, conformal["coverage"]),
                                **{k: v for k, v in conformal.items() if k not in ("threshold", "coverage")}}
    metrics.update({"run": {**(run_info or {}), **_fingerprint(scorer, task)}, "timing": timing,
                    "truncated_prompts": getattr(scorer, "truncated", 0)})
    atomic_write_json(out / METRICS_FILE, metrics)
    if report:
        from .report import write_report

        write_report(out, metrics)
    return metrics


def summarize(records: list[dict], *, task: str = "", temperature: float | None = None, n_boot: int = 2000) -> dict:
    """Metrics of a run from its records: main numbers at ``temperature``, calibration at T=1 and T."""
    lab = [r for r in records if r["answer"] is not None]
    base = {"task": task, "n_items": len(records), "n_labelled": len(lab), "temperature": temperature}
    if not lab:
        return {**base, "note": "no gold answers: predictions only"}
    answers = [r["answer"] for r in lab]
    raw = [[math.exp(x) for x in r["logprobs_raw"]] for r in lab]  # T = 1
    probs = [r["probs"] for r in lab]
    m = {**base, **M.compute_metrics(probs, answers, [r["subject"] for r in lab], n_boot=n_boot)}
    mass = [r["letter_mass"] for r in lab if r.get("letter_mass") is not None]
    if mass:
        m["mean_letter_mass"] = sum(mass) / len(mass)
    if temperature and temperature != 1.0:
        m["uncalibrated"] = M.calibration_summary(raw, answers)
    return m


def calibrate(scorer, items: Sequence[MCQItem], out_dir: str | Path, *, coverage: float | None = None,
              resume: bool = False, progress: bool = True, task: str = "") -> dict:
    """Score validation items, fit a temperature (and a conformal threshold at ``coverage``).

    Returns ``{"temperature", "n", "nll_before", "nll_after", ["coverage", "threshold"]}``.
    """
    labelled = [it for it in items if it.answer is not None]
    records, _ = score_items(scorer, labelled, Path(out_dir), resume=resume, task=f"{task}:calibration".strip(":"),
                             progress=progress)
    rows, answers = [r["logprobs_raw"] for r in records], [r["answer"] for r in records]
    t = cal.fit_temperature(rows, answers)
    info = {"temperature": t, "n": len(rows), "nll_before": cal.temperature_nll(rows, answers, 1.0),
            "nll_after": cal.temperature_nll(rows, answers, t), "style": getattr(scorer, "style", None),
            "at_bound": not (cal.T_MIN * 1.01 < t < cal.T_MAX * 0.99)}
    if coverage is not None:
        probs = [[math.exp(x) for x in r] for r in cal.apply_temperature(rows, t)]
        info.update(coverage=coverage, threshold=cal.conformal_threshold(probs, answers, coverage))
    atomic_write_json(Path(out_dir) / cal.CALIBRATION_FILE, info)
    return info


def evaluate_tasks(scorer, tasks: Sequence[str], out_root: str | Path, *, limit: int | None = None,
                   label: str = "model", **kw) -> dict:
    """Evaluate several named tasks into ``out_root/<task>/`` and write a leaderboard-style summary.

    ``kw`` goes to :func:`evaluate` (resume, temperature, conformal, run_info...).  A per-task
    ``temperatures``/``conformals`` dict in ``kw`` overrides the shared value for that task.
    """
    from ..data import resolve_task
    from .report import write_summary

    out_root = Path(out_root)
    temps, confs = kw.pop("temperatures", {}) or {}, kw.pop("conformals", {}) or {}
    results = {}
    for name in tasks:
        loaded = resolve_task(name, "eval", limit=limit)
        log.info("task %s: %d items from %s", name, len(loaded.items), loaded.source)
        task_kw = {**kw, "temperature": temps.get(name, kw.get("temperature")),
                   "conformal": confs.get(name, kw.get("conformal")),
                   "run_info": {**(kw.get("run_info") or {}), "source": loaded.source}}
        results[name] = evaluate(scorer, loaded.items, out_root / name, task=name, **task_kw)
    write_summary(out_root, results, label=label)
    return results


def load_run(run_dir: str | Path) -> dict[str, list[dict]]:
    """``{task: records}`` of a run folder: one task, or a multi-task folder with task subfolders."""
    run = Path(run_dir)
    if (run / PRED_FILE).is_file():
        return {run.name: read_jsonl_complete(run / PRED_FILE)}
    subs = {p.parent.name: read_jsonl_complete(p) for p in sorted(run.glob(f"*/{PRED_FILE}"))}
    if not subs:
        raise MedQAError(f"{run} has no {PRED_FILE} (is it an eval run folder?)")
    return subs


def compare_runs(run_a: str | Path, run_b: str | Path, out: str | Path | None = None, n_boot: int = 10000) -> dict:
    """Paired comparison (B vs A) on the items both runs scored; per task for multi-task folders."""
    a, b = load_run(run_a), load_run(run_b)
    if len(a) == 1 and len(b) == 1:  # single-task folders may have different names
        pairs = {next(iter(b)): (next(iter(a.values())), next(iter(b.values())))}
    else:
        pairs = {t: (a[t], b[t]) for t in a if t in b}
    if not pairs:
        raise MedQAError(f"{run_a} and {run_b} share no task; compare runs of the same task(s)")
    result = {"run_a": str(run_a), "run_b": str(run_b), "tasks": {}}
    for task, (ra, rb) in pairs.items():
        ia = {r["id"]: r for r in ra if r.get("correct") is not None}
        ib = {r["id"]: r for r in rb if r.get("correct") is not None}
        ids = [i for i in ia if i in ib]
        if not ids:
            raise MedQAError(f"task {task}: the two runs have no labelled item ids in common")
        comp = M.paired_comparison(ids, [ia[i]["correct"] for i in ids], [ib[i]["correct"] for i in ids], n_boot=n_boot)
        comp["only_in_one_run"] = len(set(ia) ^ set(ib))
        result["tasks"][task] = comp
    if out is not None:
        from .report import write_comparison

        write_comparison(Path(out), result)
    return result
