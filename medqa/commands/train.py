"""LoRA fine-tune a causal LM on MCQ data (prompt masked, answer + explanation + EOS supervised).

Examples::

    medqa train                                      # default preset, embedded Gemma 270M, MedMCQA train split
    medqa train --config configs/default.yaml --eval-task medmcqa --eval-limit 500
    medqa train --preset seed --out runs/seed       # the published recipe, for comparison
    medqa train --out runs/train-x --resume          # continue after a crash / Ctrl-C
    accelerate launch --config_file configs/accelerate/ddp_gpu.yaml -m medqa train --config configs/default.yaml
"""
from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    from ..training.config import add_arguments

    add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    import os

    # Threads that finished their share of a parallel region sleep instead of spinning.  On a shared or
    # oversubscribed CPU, spinning OpenMP threads burn the time slices their siblings need: measured here
    # (2 cores, load ~9) a LoRA step ran 8x faster with PASSIVE.  Must be set before torch is imported.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from ..training.config import command_line, from_args
    from ..training.loop import train

    from pathlib import Path

    out = getattr(args, "run__out", None)
    if getattr(args, "run__resume", False) and out and not args.config and (Path(out) / "config.yaml").is_file():
        args.config = str(Path(out) / "config.yaml")  # `--out X --resume` continues X with X's own config
    cfg = from_args(args)
    result = train(cfg, command=command_line())
    if result.stopped == "interrupted":
        return 130
    if result.adapter_dir is not None:
        s = result.summary
        print(f"\nstopped: {result.stopped} after {result.steps} steps; best validation accuracy "
              f"{(result.best_accuracy or 0):.2%} at step {result.best_step}"
              + (f"; temperature {result.temperature:.3f}" if result.temperature else ""))
        if result.best_step == 0:
            print("note: no trained checkpoint beat the base model on validation; the adapter is the untrained "
                  "(identity) one (try more data/epochs or another --lr)")
        fe = s.get("final_eval")
        if fe:
            b, l, p = fe["base"], fe["lora"], fe["paired"]
            print(f"{fe['task']} ({fe['n']} questions): base {b['accuracy']:.2%} -> adapter {l['accuracy']:.2%} "
                  f"(McNemar p = {p['mcnemar']['p_exact']:.3g}); reports in {result.run_dir / 'eval'}")
        print(f"adapter:    {result.adapter_dir}  (model card: {result.adapter_dir / 'README.md'})")
        print(f"run folder: {result.run_dir}  (config.yaml, metrics.jsonl, loss_curve.png, summary.json)")
    return 0
