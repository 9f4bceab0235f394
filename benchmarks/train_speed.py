"""Training speed of medqa's ``default`` recipe vs the seed recipe run through plain HF Trainer.

    python benchmarks/train_speed.py --n 48 [--threads 2] [--val 0] [--json out.json]
    python benchmarks/train_speed.py --n 512 --device cuda --dtype bf16   # on a GPU (see gpu_check.sh)

Same machine, one run, the same N training examples (the first N rows of
``../shared/data/medmcqa/train_cardio_subset.jsonl``), one epoch each, fp32 on CPU, each recipe in its own
subprocess (so each peak RSS is its own; model loading is excluded from the timings):

* ``seed``    — the published recipe: HF ``Trainer`` + PEFT LoRA r=8/alpha=16/dropout 0.05 on q_proj,v_proj,
  lr 2e-4 cosine, warmup 0.05, batch 4 × accumulation 4, gradient checkpointing, max length 256, text =
  prompt + answer + explanation (no EOS), ``DataCollatorForLanguageModeling(mlm=False)`` → loss on every
  token, full-vocabulary logits at every position.
* ``default`` — ``medqa train --preset default`` (configs/default.yaml): our loop, prompt masked, LM head only
  at supervised positions, length-grouped batches, no gradient checkpointing, answer line + EOS supervised.
* optional ``default-expl`` — the same, also supervising the explanation (the seed's targets), and
  ``seed-medqa`` — the seed hyper-parameters and full-sequence loss run through medqa's loop.

Reported: training examples/s, tokens/s over the *same* examples (the seed's token count of those examples,
so the ratio is comparable) and over each recipe's own tokens, CPU seconds, peak RSS, load average.
``--val K`` also scores K held-out training-distribution items after each run (a sanity check, not the
accuracy benchmark — see train_accuracy.py).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # as `medqa train` does; before torch is imported
MAX_LENGTH = 256


def load_examples(n: int, n_val: int):
    from medqa.data import resolve_task, train_val_split

    items = resolve_task("medmcqa", split="train").items
    train, val = train_val_split(items, 0.1, seed=0)
    return train[:n], val[:n_val]


def seed_texts(items) -> list[str]:
    """The seed's training text: prompt + answer + explanation, no EOS (it never learned to stop)."""
    from medqa.prompts import render_prompt, render_target

    return [render_prompt(it) + render_target(it) for it in items]


def _val_accuracy(model, tok, val) -> float | None:
    if not val:
        return None
    from medqa.scoring.hf import HFScorer

    model.eval()
    rows = HFScorer(model, tok, style="medqa", batch_size=16).score(val)
    return sum(max(range(len(r)), key=r.__getitem__) == it.answer for r, it in zip(rows, val)) / len(val)


def worker_seed(items, val, tmp: Path, a) -> dict:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import DataCollatorForLanguageModeling, Trainer, TrainingArguments

    from medqa.modeling import load_model

    bundle = load_model(a.model, device=a.device, dtype=a.dtype)
    model, tok = bundle.model, bundle.tokenizer
    data = [tok(t, truncation=True, max_length=MAX_LENGTH) for t in seed_texts(items)]
    data = [{"input_ids": d["input_ids"], "attention_mask": d["attention_mask"]} for d in data]
    model.enable_input_require_grads()
    model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, target_modules=["q_proj", "v_proj"],
                                             task_type="CAUSAL_LM"))
    args = TrainingArguments(output_dir=str(tmp / "seed-out"), per_device_train_batch_size=4,
                             gradient_accumulation_steps=4, learning_rate=2e-4, lr_scheduler_type="cosine",
                             warmup_steps=0.05, num_train_epochs=1, gradient_checkpointing=True, logging_steps=1,
                             save_strategy="no", report_to="none", use_cpu=a.device == "cpu", disable_tqdm=True, seed=0,
                             bf16=a.dtype == "bf16", fp16=a.dtype == "fp16")
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      data_collator=DataCollatorForLanguageModeling(tok, mlm=False))
    w, c = time.perf_counter(), time.process_time()
    out = trainer.train()
    wall, cpu = time.perf_counter() - w, time.process_time() - c
    own_tokens = sum(len(d["input_ids"]) for d in data)
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    with torch.no_grad():
        acc = _val_accuracy(model, tok, val)
    return {"wall_s": wall, "cpu_s": cpu, "own_tokens": own_tokens, "steps": out.global_step,
            "final_loss": losses[-1] if losses else None, "val_accuracy": acc}


#: medqa-loop recipes: (preset, extra overrides).  ``default-expl`` = default but also supervising the
#: explanation (the seed's targets, prompt still masked); ``seed-medqa`` = the seed recipe exactly, in our loop;
#: ``default-b16`` = default with the same effective batch in one forward pass (no accumulation: for GPUs).
MEDQA_RECIPES = {"default": ("default", {}),
                 "default-b16": ("default", {"optim": {"batch_size": 16, "grad_accum": 1}}),
                 "default-expl": ("default", {"data": {"with_explanation": True}}),
                 "seed-medqa": ("seed", {})}


def worker_medqa(items, val, tmp: Path, recipe: str, a) -> dict:
    from medqa.modeling import load_model
    from medqa.training.config import merge, preset_config
    from medqa.training.loop import train

    preset, extra = MEDQA_RECIPES[recipe]
    over = {"model": {"device": a.device, "dtype": a.dtype}, "optim": {"epochs": 1.0, "max_steps": 0},
            "eval": {"every": -1, "calibrate": False},
            "run": {"out": str(tmp / f"{recipe}-out"), "progress": False, "save_every": 0}}
    for sec, kv in extra.items():
        over.setdefault(sec, {}).update(kv)
    cfg = merge(preset_config(preset), over)
    bundle = load_model(a.model, device=a.device, dtype=a.dtype)
    res = train(cfg, train_items=items, val_items=[], bundle=bundle)
    sp = res.summary["speed"]
    return {"wall_s": sp["train_seconds"], "cpu_s": sp["cpu_seconds_main_process"], "own_tokens": sp["tokens"],
            "steps": res.steps, "final_loss": None, "val_accuracy": _val_accuracy(bundle.model, bundle.tokenizer, val)}


def worker_main(a) -> None:
    import torch

    if a.threads:
        torch.set_num_threads(a.threads)
    tmp = Path(a.tmp)
    items, val = load_examples(a.n, a.val)
    load0 = os.getloadavg()[0]
    out = worker_seed(items, val, tmp, a) if a.worker == "seed" else worker_medqa(items, val, tmp, a.worker, a)
    from medqa.training.run_info import peak_gpu_mb, peak_rss_mb

    out.update(recipe=a.worker, n=len(items), threads=torch.get_num_threads(), peak_rss_mb=peak_rss_mb(),
               loadavg_start=load0, loadavg_end=os.getloadavg()[0],
               peak_accel_mb=peak_gpu_mb())
    (tmp / f"{a.worker}.json").write_text(json.dumps(out), encoding="utf-8")


def common_tokens(n: int, model: str) -> int:
    """The seed tokenization's token count of the N examples (the same numerator for both recipes)."""
    from transformers import AutoTokenizer

    from medqa.modeling import resolve_model_path

    tok = AutoTokenizer.from_pretrained(resolve_model_path(model))
    items, _ = load_examples(n, 0)
    return sum(len(tok(t, truncation=True, max_length=MAX_LENGTH)["input_ids"]) for t in seed_texts(items))


def table(results: dict, tokens: int) -> str:
    accel = any(r.get("peak_accel_mb") for r in results.values())
    lines = ["| recipe | examples/s | tokens/s (same examples) | tokens/s (own tokens) | CPU s | peak RSS (MiB) | "
             + ("peak GPU mem (MiB) | " if accel else "") + "load avg | val acc | speed-up |",
             "|---" * (10 if accel else 9) + "|"]
    base = results.get("seed")
    for name, r in results.items():
        eps = r["n"] / r["wall_s"]
        up = f"{eps / (base['n'] / base['wall_s']):.2f}×" if base else "–"
        va = "–" if r.get("val_accuracy") is None else f"{100 * r['val_accuracy']:.1f}%"
        gpu = f"{r.get('peak_accel_mb') or 0:.0f} | " if accel else ""
        lines.append(f"| {name} | {eps:.3f} | {tokens / r['wall_s']:.1f} | {r['own_tokens'] / r['wall_s']:.1f} | "
                     f"{r['cpu_s']:.0f} | {r['peak_rss_mb']:.0f} | {gpu}{r['loadavg_start']:.1f}→{r['loadavg_end']:.1f} | "
                     f"{va} | {up} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=48, help="training examples (the same for both recipes)")
    ap.add_argument("--val", type=int, default=0, help="also score K held-out items after training (0 = skip)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--recipes", default="default,seed",
                    help="comma-separated: seed (HF Trainer), default, default-expl, seed-medqa (see MEDQA_RECIPES)")
    ap.add_argument("--json")
    ap.add_argument("--model", default="embedded", help="the same base model for every recipe")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, ... (the same for every recipe)")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"],
                    help="base weights and compute precision (bf16/fp16: mixed precision in both loops)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--tmp", help=argparse.SUPPRESS)
    a = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if a.worker:
        return worker_main(a)
    tokens = common_tokens(a.n, a.model)
    results = {}
    with tempfile.TemporaryDirectory(prefix="medqa-train-speed-") as tmp:
        for name in a.recipes.split(","):
            cmd = [sys.executable, __file__, "--worker", name, "--tmp", tmp, "--n", str(a.n), "--val", str(a.val),
                   "--threads", str(a.threads), "--model", a.model, "--device", a.device, "--dtype", a.dtype]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"{name} failed:\n{proc.stderr[-4000:]}")
            results[name] = json.loads((Path(tmp) / f"{name}.json").read_text())
            r = results[name]
            print(f"{name}: {r['n'] / r['wall_s']:.3f} ex/s, {r['wall_s']:.0f} s, RSS {r['peak_rss_mb']:.0f} MiB, "
                  f"load {r['loadavg_start']:.1f}", file=sys.stderr, flush=True)
    print(f"\n{a.n} MedMCQA train examples ({tokens} tokens as the seed tokenizes them, max length {MAX_LENGTH}), "
          f"1 epoch, {a.dtype}, {a.device}, model {a.model}, torch threads {a.threads}\n")
    print(table(results, tokens))
    if "seed" in results and "default" in results:
        s, d = results["seed"], results["default"]
        cpu_ratio = (s["cpu_s"] / s["n"]) / (d["cpu_s"] / d["n"])
        print(f"\nspeed-up (wall): {s['wall_s'] / d['wall_s']:.2f}×; per CPU-second: {cpu_ratio:.2f}× "
              "(less sensitive to other load on a shared machine)")
    if a.json:
        Path(a.json).write_text(json.dumps({"n": a.n, "common_tokens": tokens, "results": results}, indent=2))


if __name__ == "__main__":
    main()
