"""The README's main job: train -> evaluate -> report on the embedded default model and the local data.

It is exactly ``medqa train`` with a size that finishes in well under 20 minutes on a 2-core CPU; the
equivalent command is printed so users can scale it up (more --limit, more --eval-limit, a GPU).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="embedded", help="base model (default: the embedded Gemma 3 270M)")
    p.add_argument("--train-limit", type=int, default=256,
                   help="training questions from the MedMCQA train subset (default 256; 0 = all 1,861)")
    p.add_argument("--eval-limit", type=int, default=300,
                   help="MedMCQA dev_public questions for the before/after evaluation (default 300; 0 = all 1,999)")
    p.add_argument("--epochs", type=float, default=1.0, help="passes over the training questions")
    p.add_argument("--out", default="runs/quickstart", help="run folder (re-running resumes or reuses it)")
    p.add_argument("--fresh", action="store_true", help="ignore an earlier run in --out and start over")


def train_argv(args: argparse.Namespace, out: Path) -> list[str]:
    argv = ["train", "--preset", "default", "--model", args.model, "--task", "medmcqa",
            "--limit", str(args.train_limit), "--val-limit", "100", "--epochs", str(args.epochs),
            "--eval-every", "0", "--eval-task", "medmcqa", "--eval-limit", str(args.eval_limit), "--out", str(out)]
    if (out / "checkpoints").exists() and not args.fresh:
        argv.append("--resume")
    return argv


def run(args: argparse.Namespace) -> int:
    import shutil

    from ..cli import main as cli_main

    out = Path(args.out)
    summary_file = out / "summary.json"
    if args.fresh and out.exists():
        shutil.rmtree(out)
    if not summary_file.exists():
        argv = train_argv(args, out)
        print("quickstart = medqa " + " ".join(argv) + "\n", flush=True)
        rc = cli_main(argv)
        if rc != 0:
            return rc
    else:
        print(f"quickstart: {out} already holds a finished run (use --fresh to redo it)")
    print_report(out)
    return 0


def print_report(out: Path) -> None:
    summary = json.loads((out / "summary.json").read_text())
    fe = summary.get("final_eval") or {}
    print("\n=== MedQA quickstart report ===")
    if fe:
        b, lora, p = fe["base"], fe["lora"], fe["paired"]
        print(f"MedMCQA dev_public, {fe['n']} questions (never trained on):")
        for name, m in (("zero-shot base", b), ("base + LoRA", lora)):
            lo, hi = m.get("accuracy_ci95", (float("nan"), float("nan")))
            print(f"  {name:15s} accuracy {m['accuracy']:.1%}  (95% CI {lo:.1%}-{hi:.1%})  "
                  f"ECE {m.get('ece', float('nan')):.3f}  Brier {m.get('brier', float('nan')):.3f}")
        print(f"  paired McNemar p = {p['mcnemar']['p_exact']:.3g}")
    speed = summary.get("speed", {})
    if speed:
        print(f"training: {speed['examples']} examples in {speed['train_seconds']:.0f} s "
              f"({speed['examples_per_s']:.2f} ex/s, {speed['tokens_per_s']:.0f} tok/s)")
    print(f"adapter:  {summary['adapter']}  (model card README.md, calibration.json)")
    print(f"reports:  {out / 'eval' / 'base' / 'report.md'}  and  {out / 'eval' / 'lora' / 'report.md'}")
    print(f"try it:   medqa ask --adapter {summary['adapter']} \"Which vitamin deficiency causes scurvy?\" "
          "--options \"A) Vitamin A B) Vitamin B12 C) Vitamin C D) Vitamin D\"")
