"""After the last step (main process only): the final adapter, calibration, the eval-task comparison, report.

The final adapter is the best one by validation accuracy (``best/``), not the last; its temperature is fitted
on the validation split; ``summary.json``, the loss curve and the model card are written, and the adapter is
optionally pushed to the Hub.  Separate from loop.py because none of it is part of the training step.
"""
from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ..utils.io import atomic_dir, atomic_write_json, read_jsonl_complete
from . import checkpoint as ck

if TYPE_CHECKING:
    from .loop import TrainResult, _Run


def finish_run(run: _Run, result: TrainResult, speed: dict) -> TrainResult:
    """Everything after the last step, for the loop's ``run`` (its config, model, data and best scores)."""
    from safetensors.torch import load_file

    from . import card, plots

    cfg, run_dir, peft_model, val_items = run.cfg, run.run_dir, run.peft_model, run.val_items
    adapter_dir = run_dir / "adapter"
    if (run_dir / "best" / "adapter_model.safetensors").exists():
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(peft_model, load_file(str(run_dir / "best" / "adapter_model.safetensors")))
        best_info = json.loads((run_dir / "best" / "best.json").read_text())
        result.best_step, result.best_accuracy = best_info["step"], best_info["val_accuracy"]
    with atomic_dir(adapter_dir) as tmp:
        ck.save_adapter(peft_model, tmp)
    temperature = None
    calib: dict = {}
    if cfg.eval.calibrate and len(val_items) >= 20:
        from ..evaluation.calibration import fit_temperature, save_temperature, temperature_nll

        best_rows = run.best_rows
        if best_rows is None:  # e.g. resumed after the best evaluation: score the chosen adapter again
            best_rows = run.evaluate()[2]
        answers = [it.answer for it in val_items]
        temperature = fit_temperature(best_rows, answers)
        calib = {"fitted_on": f"validation split ({len(val_items)} items: {run.data_info.get('val_source', '')})",
                 "nll_before": temperature_nll(best_rows, answers, 1.0),
                 "nll_after": temperature_nll(best_rows, answers, temperature)}
        save_temperature(adapter_dir, temperature, calib)
    result.temperature = temperature
    final_eval = None
    if cfg.eval.task:
        final_eval = evaluate_on_task(peft_model, run.tok, cfg.eval.task, run_dir / "eval", temperature=temperature,
                                      limit=cfg.eval.limit or None, batch_size=cfg.eval.batch_size, acc=run.acc)
    records = read_jsonl_complete(run_dir / "metrics.jsonl")
    plot = plots.loss_curve(records, run_dir / "loss_curve.png",
                            title=f"LoRA r={cfg.lora.r} on {run.bundle.model_id} ({cfg.preset} preset)")
    summary = {"stopped": result.stopped, "steps": result.steps, "best_step": result.best_step,
               "best_val_accuracy": result.best_accuracy, "temperature": temperature, "calibration": calib,
               "trainable_parameters": run.n_train_params, "target_modules": run.targets, "data": run.data_info,
               "encode": {k: v for k, v in vars(run.stats).items() if k != "notes"}, "speed": speed,
               "final_eval": final_eval, "adapter": str(adapter_dir), "loss_curve": str(plot) if plot else None}
    atomic_write_json(run_dir / "summary.json", summary)
    card.write_model_card(adapter_dir, cfg, summary, base_model=run.bundle.model_id,
                          base_path=run.bundle.model_path, command=run.command)
    result.adapter_dir, result.summary = adapter_dir, summary
    if cfg.run.push_to_hub:
        push_to_hub(adapter_dir, cfg.run.push_to_hub)
    return result


def evaluate_on_task(peft_model, tok, task: str, out: Path, *, temperature: float | None, limit: int | None,
                     batch_size: int, acc=None) -> dict:
    """Base model (adapter disabled) vs adapter on ``task``'s eval split, with the evaluation harness:
    accuracy + bootstrap CI for each, paired McNemar test and paired bootstrap of the difference."""
    from ..data import resolve_task
    from ..evaluation.metrics import paired_comparison
    from ..evaluation.runner import evaluate
    from ..scoring.hf import HFScorer

    items = resolve_task(task, split="eval", limit=limit).items
    autocast = acc.autocast() if acc is not None else contextlib.nullcontext()
    peft_model.eval()
    res = {}
    with autocast:
        with peft_model.disable_adapter():
            base = HFScorer(peft_model, tok, style="medqa", batch_size=batch_size)
            base.name = "hf:base"
            res["base"] = evaluate(base, items, out / "base", task=task)
        tuned = HFScorer(peft_model, tok, style="medqa", batch_size=batch_size)
        tuned.name = "hf:base+lora"
        res["lora"] = evaluate(tuned, items, out / "lora", task=task, temperature=temperature)
    base_rows = read_jsonl_complete(out / "base" / "predictions.jsonl")
    b = [r["correct"] for r in read_jsonl_complete(out / "lora" / "predictions.jsonl")]
    comp = paired_comparison([r["id"] for r in base_rows], [r["correct"] for r in base_rows], b)
    comp = {k: v for k, v in comp.items() if k not in ("flipped_to_correct", "flipped_to_wrong")}
    out_d = {"task": task, "n": len(items), "base": _brief(res["base"]), "lora": _brief(res["lora"]), "paired": comp}
    atomic_write_json(out / "comparison.json", out_d)
    return out_d


def _brief(m: dict) -> dict:
    keys = ("n", "accuracy", "accuracy_ci95", "macro_accuracy", "nll", "ece", "brier")
    src = m.get("metrics", m)
    return {k: src[k] for k in keys if k in src}


def push_to_hub(folder: Path, repo: str) -> bool:
    """Upload the adapter folder; on an unreachable Hub print why and keep the local result."""
    try:
        from huggingface_hub import HfApi

        api = HfApi()
        api.create_repo(repo, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo, commit_message="medqa LoRA adapter")
        print(f"pushed {folder} to https://huggingface.co/{repo}")
        return True
    except Exception as e:  # noqa: BLE001 — network/auth errors come in many types; training already succeeded
        print(f"warning: --push-to-hub {repo} failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
              f"the adapter is safe in {folder}; upload later with `huggingface-cli upload {repo} {folder}`")
        return False
