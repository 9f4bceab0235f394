"""MedMCQA dev_public accuracy of the embedded Gemma 270M before and after LoRA training on the public train data.

    python benchmarks/train_accuracy.py [--out runs/bench/train_accuracy] [--eval-limit N] [TRAIN FLAGS...]

Trains on ``../shared/data/medmcqa/train_cardio_subset.jsonl`` (never on ``dev_public``; train items whose
question also appears in dev_public are dropped), with ``configs/default.yaml`` unless ``--config``/``--preset``
or any ``medqa train`` flag says otherwise (e.g. ``--epochs 3 --lr 1e-3``).  Then scores dev_public with the
evaluation harness (option-letter scoring, project template) for the base model and the adapter and reports
both accuracies with 95% bootstrap intervals, the paired McNemar test and the paired bootstrap of the gain.

Every stage is cached/resumable in ``--out``: ``zero_shot/`` and ``lora/`` (evaluation runs, resumed item by
item) and ``train/`` (a ``medqa train`` run folder, resumed from its last checkpoint).  Rerunning the same
command after an interruption continues where it stopped.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `medqa train` does; before torch is imported


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], add_help=True)
    ap.add_argument("--out", default="runs/bench/train_accuracy", help="benchmark folder (cached stages)")
    ap.add_argument("--eval-limit", type=int, default=0, help="score only the first N dev_public items (0 = all 1999)")
    ap.add_argument("--eval-batch", type=int, default=16)
    ap.add_argument("--skip-train", action="store_true", help="reuse --out/train/adapter as is")
    ap.add_argument("--zero-shot-only", action="store_true", help="only score the base model (cache it) and stop")
    a, rest = ap.parse_known_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from medqa.cli import build_parser
    from medqa.data import resolve_task
    from medqa.evaluation.calibration import load_temperature
    from medqa.evaluation.metrics import paired_comparison
    from medqa.evaluation.runner import evaluate
    from medqa.modeling import load_model
    from medqa.scoring.hf import HFScorer
    from medqa.training.config import command_line, from_args
    from medqa.training.loop import train
    from medqa.utils.io import atomic_write_json, atomic_write_text, read_jsonl_complete

    out = Path(a.out)
    targs = build_parser().parse_args(["train", *(rest or ["--config", str(REPO / "configs" / "default.yaml")])])
    cfg = from_args(targs)
    cfg.data.task, cfg.data.train_file = "medmcqa", ""  # the public train split, always
    cfg.run.out = str(out / "train")
    cfg.eval.task = ""  # the benchmark scores dev_public itself, below
    dev = resolve_task("medmcqa", split="eval", limit=a.eval_limit or None)
    items = dev.items
    print(f"dev: {len(items)} items from {dev.source}; train config preset {cfg.preset}", flush=True)

    def score(bundle, folder: Path, temperature=None) -> dict:
        scorer = HFScorer(bundle.model, bundle.tokenizer, style="medqa", batch_size=a.eval_batch)
        scorer.name = "hf:" + ("base" if not bundle.adapter else "lora")
        return evaluate(scorer, items, folder, resume=True, temperature=temperature, task="medmcqa",
                        run_info={"adapter": bundle.adapter, "source": dev.source})

    timings = {}
    t = time.time()
    base = load_model(cfg.model.name, device="cpu" if cfg.model.device == "auto" else cfg.model.device)
    m0 = score(base, out / "zero_shot")
    timings["zero_shot_s"] = time.time() - t
    print(f"zero-shot: {m0['accuracy']:.2%} {m0['accuracy_ci95']}", flush=True)
    del base
    if a.zero_shot_only:
        return 0

    adapter = out / "train" / "adapter"
    t = time.time()
    if not (a.skip_train and adapter.is_dir()):
        if adapter.is_dir():
            print(f"{adapter} exists: using it (delete {out / 'train'} to retrain)", flush=True)
        else:
            cfg.run.resume = (out / "train" / "checkpoints").is_dir()
            res = train(cfg, command=command_line(["train", *rest]) + f"  # via {Path(__file__).name}")
            if res.adapter_dir is None:
                print("training did not finish (interrupted); rerun the same command to resume", flush=True)
                return 130
    timings["train_s"] = time.time() - t
    summary = json.loads((out / "train" / "summary.json").read_text()) if (out / "train" / "summary.json").exists() else {}

    t = time.time()
    tuned = load_model(cfg.model.name, adapter=str(adapter), device="cpu" if cfg.model.device == "auto" else cfg.model.device)
    temp = load_temperature(adapter)
    m1 = score(tuned, out / "lora", temperature=temp)
    timings["lora_eval_s"] = time.time() - t
    recs0 = read_jsonl_complete(out / "zero_shot" / "predictions.jsonl")
    recs1 = {r["id"]: r for r in read_jsonl_complete(out / "lora" / "predictions.jsonl")}
    ids = [r["id"] for r in recs0]
    comp = paired_comparison(ids, [r["correct"] for r in recs0], [recs1[i]["correct"] for i in ids])
    comp.pop("flipped_to_correct"), comp.pop("flipped_to_wrong")
    result = {"n": len(items), "eval_source": dev.source, "zero_shot": {k: m0[k] for k in ("accuracy", "accuracy_ci95", "nll", "ece")},
              "lora": {k: m1[k] for k in ("accuracy", "accuracy_ci95", "nll", "ece")}, "temperature": temp,
              "paired": comp, "train": {"config": cfg.to_dict(), "steps": summary.get("steps"),
                                        "best_step": summary.get("best_step"),
                                        "best_val_accuracy": summary.get("best_val_accuracy"),
                                        "data": summary.get("data"), "speed": summary.get("speed")},
              "timings_s": timings, "command": "python benchmarks/train_accuracy.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    atomic_write_json(out / "results.json", result)
    md = render(result)
    atomic_write_text(out / "results.md", md)
    print("\n" + md)
    return 0


def render(r: dict) -> str:
    z, l, p = r["zero_shot"], r["lora"], r["paired"]
    bs, mc = p["bootstrap"], p["mcnemar"]
    tr = r["train"]
    sp = tr.get("speed") or {}
    c = tr["config"]
    return "\n".join([
        f"Command: `{r.get('command', 'python benchmarks/train_accuracy.py')}`",
        "",
        f"MedMCQA dev_public, {r['n']} questions ({r['eval_source']}), option-letter scoring, project template:",
        "",
        "| model | accuracy [95% bootstrap CI] | NLL | ECE |", "|---|---|---|---|",
        f"| Gemma 3 270M zero-shot | {100 * z['accuracy']:.1f}% [{100 * z['accuracy_ci95'][0]:.1f}, "
        f"{100 * z['accuracy_ci95'][1]:.1f}] | {z['nll']:.3f} | {z['ece']:.3f} |",
        f"| + LoRA ({c['preset']} preset) | {100 * l['accuracy']:.1f}% [{100 * l['accuracy_ci95'][0]:.1f}, "
        f"{100 * l['accuracy_ci95'][1]:.1f}] | {l['nll']:.3f} | {l['ece']:.3f} |",
        "",
        f"Gain {100 * bs['diff']:+.1f} points, paired bootstrap 95% CI [{100 * bs['ci95'][0]:+.1f}, "
        f"{100 * bs['ci95'][1]:+.1f}], p = {bs['p_value']:.3g}; McNemar exact p = {mc['p_exact']:.3g} "
        f"({mc['only_b']} fixed, {mc['only_a']} broken). Temperature {r['temperature'] or 1.0:.3f} (NLL/ECE of the "
        "adapter are at that temperature).",
        "",
        f"Training: {(tr.get('data') or {}).get('n_train')} items of medmcqa/train_cardio_subset.jsonl, "
        f"{tr.get('steps')} steps, best validation accuracy {100 * (tr.get('best_val_accuracy') or 0):.1f}% at step "
        f"{tr.get('best_step')}; {sp.get('train_seconds', 0) / 60:.0f} min, {sp.get('examples_per_s', 0):.2f} ex/s, "
        f"{sp.get('tokens_per_s', 0):.0f} tok/s.",
    ]) + "\n"


if __name__ == "__main__":
    sys.exit(main())
