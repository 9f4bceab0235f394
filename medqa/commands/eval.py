"""Evaluate a model (optionally + LoRA adapter) on MCQ benchmarks: accuracy, calibration, reports.

Examples::

    medqa eval --tasks medmcqa,medqa,pubmedqa,mmlu_medical
    medqa eval --data my.jsonl --limit 200 --prompt-style lmeval --out runs/mine
    medqa eval --adapter out/lora --tasks medmcqa --calibrate-on auto --conformal 0.9
    medqa eval --compare runs/base runs/lora
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

CALIBRATION_LIMIT = 500  # validation items scored per task for --calibrate-on auto
CARVE_FRACTION = 0.3  # share of the eval items held out for calibration when a task has no train split
MIN_CALIBRATION = 20  # fewer validation items cannot pin down a temperature


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="embedded", help="embedded (default), a Hub id, a folder or a .gguf file")
    parser.add_argument("--adapter", metavar="DIR", help="LoRA adapter folder; its calibration.json is used if present")
    src = parser.add_mutually_exclusive_group()
    src.add_argument("--tasks", help="comma-separated: medmcqa,medqa,pubmedqa,mmlu_medical (default medmcqa)")
    src.add_argument("--data", metavar="FILE", help="evaluate one file (or Hub dataset id) instead of named tasks")
    parser.add_argument("--dataset", metavar="NAME", help="with --data: medmcqa, medqa, pubmedqa, mmlu or generic")
    parser.add_argument("--limit", type=int, help="evaluate at most N items per task")
    parser.add_argument("--prompt-style", choices=("medqa", "lmeval"), default="medqa",
                        help="project template (default) or the lm-evaluation-harness MMLU-style prompt")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--threads", type=int, help="torch CPU threads (on a busy shared CPU, 1 is often fastest)")
    parser.add_argument("--out", metavar="DIR", help="run folder (default runs/eval-<time>)")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    parser.add_argument("--calibrate-on", metavar="FILE|auto",
                        help="fit a temperature on this labelled validation file, or 'auto' (each task's train split, "
                             "else 30%% of its eval items held out); saved next to --adapter")
    parser.add_argument("--calibration-limit", type=int, default=CALIBRATION_LIMIT, help="max validation items per task")
    parser.add_argument("--conformal", type=float, metavar="COVERAGE", help="add conformal prediction sets, e.g. 0.9")
    parser.add_argument("--temperature", type=float, help="apply this temperature (overrides calibration.json)")
    parser.add_argument("--compare", nargs=2, metavar=("RUN_A", "RUN_B"), help="paired comparison of two run folders")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--rag", metavar="INDEX", help="ground every question on top-k passages from this index")
    parser.add_argument("--rag-k", type=int, default=3, metavar="K", help="passages per question with --rag (default 3)")
    parser.add_argument("--allow-leakage", action="store_true",
                        help="with --rag: warn instead of refusing when the index contains evaluated questions")


def run(args: argparse.Namespace) -> int:
    from ..records import MedQAError

    if args.compare:
        return _compare(args)
    if args.resume and not args.out:
        raise MedQAError("--resume needs --out RUN_FOLDER (the folder of the interrupted run)")
    if args.temperature is not None and args.calibrate_on:
        raise MedQAError("use either --temperature T or --calibrate-on, not both")
    if args.conformal is not None and not 0 < args.conformal < 1:
        raise MedQAError(f"--conformal takes a coverage between 0 and 1, e.g. 0.9 (got {args.conformal})")
    out = Path(args.out or f"runs/eval-{time.strftime('%Y%m%d-%H%M%S')}")
    jobs = _load_jobs(args)  # {task: (eval items, calibration items | None, source)}

    from ..evaluation.report import summary_table, write_summary
    from ..evaluation.runner import evaluate
    from ..modeling import load_model
    from ..scoring.hf import scorer_from_bundle

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)  # OpenMP workers spin-wait on each other when cores are busy
    bundle = load_model(args.model, args.adapter, args.device, args.dtype)
    scorer = scorer_from_bundle(bundle, style=args.prompt_style, batch_size=args.batch_size)
    info = {"model": bundle.model_id, "model_path": bundle.model_path, "adapter": bundle.adapter,
            "device": bundle.device.device, "dtype": str(bundle.dtype).replace("torch.", ""),
            "style": args.prompt_style, "batch_size": args.batch_size}
    print(f"model {bundle.model_id}{' + ' + bundle.adapter if bundle.adapter else ''} on {info['device']} "
          f"({info['dtype']}), loaded in {bundle.load_seconds:.1f} s; prompt style {args.prompt_style}")
    if args.rag:
        scorer = _grounded(scorer, args, jobs)
    temps, confs = _calibration(args, scorer, jobs, out)
    single = args.data is not None
    results = {}
    for task, (items, _cal, source) in jobs.items():
        results[task] = evaluate(scorer, items, out if single else out / task, resume=args.resume,
                                 temperature=temps.get(task), conformal=confs.get(task), task=task,
                                 run_info={**info, "source": source}, progress=not args.no_progress)
    label = bundle.model_id + (f" + {Path(bundle.adapter).name}" if bundle.adapter else "")
    if not single:
        write_summary(out, results, label=label)
    _print_results(results, summary_table(results, label))
    print(f"\nrun folder: {out}")
    return 0


def _grounded(scorer, args, jobs: dict):
    """Wrap the scorer with retrieval, after the leakage guard: an index holding the evaluated questions
    (exact or near-duplicate text) would turn the benchmark into a lookup, so that is refused by default."""
    from ..rag import check_leakage, load_retriever
    from ..rag.scoring import RetrievalScorer
    from ..records import MedQAError

    if args.rag_k < 1:
        raise MedQAError(f"--rag-k must be at least 1 (got {args.rag_k})")
    retriever = load_retriever(args.rag)
    for task, (items, _cal, _source) in jobs.items():
        report = check_leakage(retriever, items)
        print(f"leakage check ({task}): {report.summary()}")
        if report.has_leakage and not args.allow_leakage:
            report.raise_if_leaked(f"the {task} items being evaluated")
    return RetrievalScorer(scorer, retriever, k=args.rag_k)


def _load_jobs(args) -> dict:
    """Eval items per task, plus calibration items when --calibrate-on asks for them."""
    from ..data import TASKS, load_items, resolve_task, train_val_split
    from ..records import MedQAError

    if args.data:
        loaded = load_items(args.data, args.dataset, limit=args.limit)
        names = {loaded.dataset or "data": loaded}
    else:
        tasks = [t.strip() for t in (args.tasks or "medmcqa").split(",") if t.strip()]
        unknown = [t for t in tasks if t not in TASKS]
        if unknown:
            raise MedQAError(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)}")
        # with --calibrate-on auto, a task may need its full eval set to carve calibration items from
        full = args.calibrate_on == "auto"
        names = {t: resolve_task(t, "eval", limit=None if full else args.limit) for t in tasks}
    cal_file = None
    if args.calibrate_on and args.calibrate_on != "auto":
        cal_file = load_items(args.calibrate_on, args.dataset, limit=args.calibration_limit).items
    jobs = {}
    for task, loaded in names.items():
        items, cal = loaded.items, cal_file
        if args.calibrate_on == "auto":
            cal = _train_split(task, args) if not args.data else None
            if cal is None:  # no train split: hold out part of the eval items, never score them twice
                items, cal = train_val_split(items, val_fraction=CARVE_FRACTION, seed=0)
                cal = cal[: args.calibration_limit]
                print(f"{task}: no train split; calibrating on {len(cal)} held-out eval items")
            items = items[: args.limit] if args.limit is not None else items
        if cal is not None and len([c for c in cal if c.answer is not None]) < MIN_CALIBRATION:
            raise MedQAError(f"{task}: only {len(cal)} labelled calibration items; at least {MIN_CALIBRATION} are "
                             "needed (raise --calibration-limit, or pass a bigger --calibrate-on FILE)")
        jobs[task] = (items, cal, loaded.source)
    return jobs


def _train_split(task: str, args):
    """The task's train split for calibration, or None (then part of the eval items is held out).

    With a local data dir, a task without local train files is not fetched from the Hub: that would
    need network access and mix sources.
    """
    from ..data import TASKS, find_data_dir, resolve_task
    from ..records import MedQAError

    if not TASKS[task].train_files and find_data_dir() is not None:
        return None
    try:
        return resolve_task(task, "train", limit=args.calibration_limit).items or None
    except MedQAError:
        return None


def _calibration(args, scorer, jobs: dict, out: Path) -> tuple[dict, dict]:
    """Per-task temperature and conformal settings, from --temperature, --calibrate-on or the adapter."""
    from ..evaluation.calibration import load_calibration, save_temperature
    from ..evaluation.runner import calibrate
    from ..records import MedQAError

    if args.temperature is not None:
        if args.temperature <= 0:
            raise MedQAError(f"--temperature must be positive (got {args.temperature})")
        if args.conformal is not None:
            raise MedQAError("--conformal needs calibration data: add --calibrate-on FILE|auto")
        return {t: args.temperature for t in jobs}, {}
    if not args.calibrate_on:
        return _from_adapter(args, jobs, load_calibration(args.adapter))
    temps, confs, fits = {}, {}, {}
    for task, (_items, cal, _src) in jobs.items():
        where = out / "calibration" / task if len(jobs) > 1 else out / "calibration"
        fit = calibrate(scorer, cal, where, coverage=args.conformal, resume=args.resume,
                        progress=not args.no_progress, task=task)
        fits[task], temps[task] = fit, fit["temperature"]
        if args.conformal is not None:
            confs[task] = {"coverage": args.conformal, "threshold": fit["threshold"]}
        print(f"{task}: temperature {fit['temperature']:.3f} fitted on {fit['n']} validation items "
              f"(NLL {fit['nll_before']:.4f} -> {fit['nll_after']:.4f})")
        if fit.get("at_bound"):
            print(f"  note: the temperature hit its search bound: on this validation set the option scores carry "
                  f"almost no information (near-uniform is best); check accuracy before trusting them")
    if args.adapter and Path(args.adapter).is_dir():
        first = next(iter(fits.values()))
        path = save_temperature(args.adapter, first["temperature"], {
            "style": args.prompt_style, "fitted_on": args.calibrate_on, "per_task": {t: f["temperature"] for t, f in fits.items()},
            **({"conformal": {t: {"coverage": f["coverage"], "threshold": f["threshold"]} for t, f in fits.items()}}
               if args.conformal is not None else {})})
        print(f"saved calibration to {path}")
    return temps, confs


def _from_adapter(args, jobs: dict, saved: dict | None) -> tuple[dict, dict]:
    """Use the adapter's calibration.json (per-task temperature when it has one) — and say so."""
    from ..records import MedQAError

    if saved is None:
        if args.conformal is not None:
            raise MedQAError("--conformal needs calibration data: add --calibrate-on FILE|auto")
        return {}, {}
    if saved.get("style") and saved["style"] != args.prompt_style:
        print(f"note: {args.adapter}/calibration.json was fitted for prompt style {saved['style']!r}; not applied")
        return {}, {}
    per_task, conf = saved.get("per_task") or {}, saved.get("conformal") or {}
    temps = {t: float(per_task.get(t, saved["temperature"])) for t in jobs}
    confs = {}
    if args.conformal is not None:
        for t in jobs:
            c = conf.get(t)
            if not c or abs(c["coverage"] - args.conformal) > 1e-9:
                raise MedQAError(f"{args.adapter}/calibration.json has no conformal threshold for {t} at "
                                 f"{args.conformal}; add --calibrate-on FILE|auto")
            confs[t] = c
    print("using calibration from " + f"{args.adapter}/calibration.json: " + ", ".join(f"{t} T={v:.3f}" for t, v in temps.items()))
    return temps, confs


def _print_results(results: dict, table: str) -> None:
    print("\n" + table + "\n")
    for task, m in results.items():
        if "accuracy" not in m:
            print(f"{task}: {m['n_items']} items, no gold answers (predictions only)")
            continue
        lo, hi = m["accuracy_ci95"]
        line = (f"{task}: n={m['n_labelled']} acc {100 * m['accuracy']:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] "
                f"ECE {m['ece']:.3f}")
        if m.get("uncalibrated"):
            line += f" (T=1: {m['uncalibrated']['ece']:.3f}, T={m['temperature']:.2f})"
        if m.get("conformal"):
            c = m["conformal"]
            line += f"; sets@{c['target_coverage']:.0%}: coverage {c['empirical_coverage']:.1%}, size {c['mean_set_size']:.2f}"
        qps = (m.get("timing") or {}).get("questions_per_second")
        print(line + (f"; {qps:.2f} q/s" if qps else ""))


def _compare(args) -> int:
    from ..evaluation.report import comparison_markdown
    from ..evaluation.runner import compare_runs

    a, b = args.compare
    out = Path(args.out) if args.out else Path(b)
    result = compare_runs(a, b, out=out)
    print(comparison_markdown(result, max_ids=10))
    print(f"written: {out / 'comparison.md'}, {out / 'comparison.json'}")
    return 0
