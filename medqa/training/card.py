"""The model card (``README.md`` in the adapter folder): what was trained, on what, and how well it does."""
from __future__ import annotations

from pathlib import Path

from ..utils.io import atomic_write_text


def _pct(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _ci(ci) -> str:
    return "" if not ci else f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def eval_table(final_eval: dict | None) -> str:
    if not final_eval:
        return "_No held-out evaluation was run (pass `--eval-task medmcqa` to add one)._\n"
    b, l, p = final_eval["base"], final_eval["lora"], final_eval["paired"]
    mc, bs = p.get("mcnemar", {}), p.get("bootstrap", {})
    lines = [f"Task **{final_eval['task']}** eval split, {final_eval['n']} questions, option-letter scoring "
             "(`medqa eval`), 95% bootstrap intervals:\n",
             "| model | accuracy [95% CI] | NLL | ECE |", "|---|---|---|---|",
             f"| base (zero-shot) | {_pct(b.get('accuracy'))}{_ci(b.get('accuracy_ci95'))} | {b.get('nll', 0):.3f} | "
             f"{b.get('ece', 0):.3f} |",
             f"| base + this adapter | {_pct(l.get('accuracy'))}{_ci(l.get('accuracy_ci95'))} | {l.get('nll', 0):.3f} | "
             f"{l.get('ece', 0):.3f} |", ""]
    if bs:
        lines.append(f"Difference {100 * bs['diff']:+.1f} points (paired bootstrap 95% CI "
                     f"[{100 * bs['ci95'][0]:+.1f}, {100 * bs['ci95'][1]:+.1f}], p = {bs['p_value']:.3g}); "
                     f"McNemar exact p = {mc.get('p_exact', float('nan')):.3g} "
                     f"({mc.get('only_b', 0)} questions fixed, {mc.get('only_a', 0)} broken).\n")
    return "\n".join(lines) + "\n"


def render_model_card(cfg, summary: dict, base_model: str, base_path: str = "", command: str = "") -> str:
    enc = summary.get("encode", {})
    data = summary.get("data", {})
    speed = summary.get("speed", {})
    t = summary.get("temperature")
    front = ["---", "library_name: peft", "pipeline_tag: text-generation",
             f"base_model: {'google/gemma-3-270m' if base_model in ('embedded', 'gemma3-270m') else base_model}",
             "tags: [lora, medical, multiple-choice, medqa]", "---", ""]
    body = [
        f"# LoRA adapter for clinical multiple-choice QA ({cfg.preset} preset)", "",
        f"Base model: `{base_model}`" + (f" (loaded from `{base_path}`)" if base_path and base_path != base_model else ""),
        "",
        "Answers a question rendered with the medqa prompt template (`### Question:` … `### Options:` … "
        "`### Answer:`) with the option letter and the option text"
        + (", then an explanation" if cfg.data.with_explanation else " (trained without explanations)")
        + ", then EOS. For scoring, read the next-token distribution over the option letters after "
        "`### Answer:\\n`.", "",
        "## Evaluation", "",
        eval_table(summary.get("final_eval")),
        f"Validation accuracy of the chosen checkpoint (step {summary.get('best_step')}): "
        f"{_pct(summary.get('best_val_accuracy'))} on {data.get('n_val', '?')} held-out training-distribution items."
        + (" **No trained checkpoint beat the base model on validation, so this adapter is the untrained (identity) "
           "one: it changes nothing but the calibration temperature.**" if summary.get("best_step") == 0 else ""),
        "",
        f"Calibration: temperature **{t:.3f}** (in `calibration.json`, fitted on the validation split; "
        f"NLL {summary.get('calibration', {}).get('nll_before', float('nan')):.3f} → "
        f"{summary.get('calibration', {}).get('nll_after', float('nan')):.3f}); `medqa eval/ask --adapter` apply it."
        if t else "Calibration: none fitted.", "",
        "## Training", "",
        f"- data: {data.get('train_source', '?')} — {data.get('n_train', '?')} train items, validation: "
        f"{data.get('val_source', '?')}; items whose question appears in the task's eval split are dropped "
        f"({data.get('dropped_overlapping_eval', 0)} dropped)",
        f"- tokens: {enc.get('tokens', '?')} ({enc.get('supervised', '?')} supervised: answer line"
        f"{' + explanation' if cfg.data.with_explanation else ''} + EOS; "
        f"prompt {'also supervised' if cfg.data.train_on_prompt else 'masked'}); max length {cfg.data.max_length}, "
        f"explanations cut to fit: {enc.get('explanation_cut', 0)}",
        f"- LoRA r={cfg.lora.r}, alpha={cfg.lora.alpha:g}, dropout={cfg.lora.dropout}, modules "
        f"{', '.join(summary.get('target_modules', []))}{f', layers {cfg.lora.layers}' if cfg.lora.layers else ''}; "
        f"{summary.get('trainable_parameters', 0):,} trainable parameters",
        f"- optimizer AdamW lr {cfg.optim.lr:g} ({cfg.optim.scheduler}, warmup {cfg.optim.warmup_ratio:g}), "
        f"batch {cfg.optim.batch_size} × accumulation {cfg.optim.grad_accum}, {summary.get('steps')} steps, "
        f"stopped: {summary.get('stopped')}",
        f"- loss weights: letter {cfg.data.letter_weight:g}, option text/EOS {cfg.data.answer_weight:g}"
        + (f", explanation {cfg.data.explanation_weight:g}" if cfg.data.with_explanation else "")
        + (f"; options shuffled with probability {cfg.data.permute_options:g}" if cfg.data.permute_options else ""),
        f"- speed: {speed.get('examples_per_s', 0):.2f} examples/s, {speed.get('tokens_per_s', 0):.0f} tokens/s, "
        f"peak RSS {speed.get('peak_rss_mb', 0):.0f} MiB", "",
    ]
    if command:
        body += ["Command:", "", "```", command, "```", ""]
    body += [
        "## Use", "",
        "```python",
        "from peft import PeftModel",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        f"base = AutoModelForCausalLM.from_pretrained({base_path or base_model!r})",
        "model = PeftModel.from_pretrained(base, 'path/to/this/folder')",
        "```", "",
        "or `medqa eval --adapter DIR`, `medqa ask --adapter DIR`, `medqa export --adapter DIR --merge --out DIR`.", "",
        "## Limitations", "",
        "A 270M-parameter model fine-tuned on a small, topic-filtered (cardiology) MedMCQA sample: far from "
        "clinical-grade accuracy. For research and education only; never for patient care.", "",
    ]
    return "\n".join(front + body)


def write_model_card(adapter_dir: str | Path, cfg, summary: dict, base_model: str, base_path: str = "",
                     command: str = "") -> Path:
    path = Path(adapter_dir) / "README.md"
    atomic_write_text(path, render_model_card(cfg, summary, base_model, base_path, command))
    return path
