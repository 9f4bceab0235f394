"""The one LoRA training loop (Accelerate): single device, or DDP/FSDP/DeepSpeed under ``accelerate launch``/torchrun.

What makes it fast on a 262k-vocabulary model: the decoder runs over the batch, then the LM head is
applied only at the N supervised positions — ``(N, H) @ (H, V)`` instead of ``(B, T, H) @ (H, V)`` — and the
cross-entropy is taken there (:class:`SupervisedLM`, lora.py).  Batches are length-grouped (little padding), and the
loss of an optimizer step is normalised by the step's *global* supervised weight, which every process can
compute from token lengths alone, so 1 process with batch 8 and 2 processes with batch 4 take the same step.

Safety: a non-finite loss or gradient (bf16 overflow on ROCm, fp16 without loss scaling) stops training
before the bad update, with a checkpoint of the last good state and advice; checkpoints are atomic and
hold optimizer/scheduler/RNG/data position, so ``--resume`` replays the exact remaining batches; Ctrl-C
finishes the current step, saves, and exits.

Test hook: ``MEDQA_FAULT=nan@K`` poisons the loss of step K, ``MEDQA_FAULT=crash@K`` kills the process
(``os._exit(137)``, like ``kill -9``) right after step K.
"""
from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..records import MCQItem, MedQAError
from ..utils.io import JsonlAppender, atomic_dir, atomic_write_json, read_jsonl_complete, write_jsonl
from . import checkpoint as ck
from .config import TrainConfig
from .data import load_training_items, resolve_items
from .finish import _finish, evaluate_on_task, push_to_hub
from .lora import (_lora_model, _lora_state, _module_class, add_lora, count_parameters, linear_module_names,
                   n_layers, resolve_target_modules)
from .tokenize import BatchPlan, EpochExamples, ExampleEncoder, SupervisedCollator, steps_per_epoch

# the model pieces, data loading and post-training steps live in lora.py, data.py and finish.py; they stay
# importable from here, where callers have always found them
__all__ = ["TrainResult", "TrainingDiverged", "add_lora", "count_parameters", "default_run_dir",
           "evaluate_on_task", "linear_module_names", "load_training_items", "n_layers", "push_to_hub",
           "resolve_target_modules", "train"]

log = logging.getLogger(__name__)

#: config keys that may differ between a run and its --resume (they do not change the math of a step)
RESUME_MAY_CHANGE = {("model", "precision"), ("model", "dtype"), ("model", "device"), ("model", "threads"),
                     ("eval", "batch_size"), ("eval", "task"), ("eval", "limit"), ("eval", "calibrate")}


class TrainingDiverged(MedQAError):
    """The loss or gradient became NaN/inf; the message names the last good checkpoint."""


@dataclass
class TrainResult:
    run_dir: Path
    adapter_dir: Path | None
    stopped: str  # completed | early_stopping | interrupted
    steps: int
    best_step: int | None = None
    best_accuracy: float | None = None
    temperature: float | None = None
    summary: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- helpers


def _fault() -> dict[str, int]:
    spec = os.environ.get("MEDQA_FAULT", "")
    out = {}
    for part in filter(None, spec.split(",")):
        kind, _, at = part.partition("@")
        if kind in ("nan", "crash") and at.isdigit():
            out[kind] = int(at)
    return out


def _precision(cfg: TrainConfig, device_kind: str) -> str:
    """Accelerate's mixed_precision for --precision: no (fp32) | bf16 | fp16."""
    p = cfg.model.precision
    if p == "auto":
        if os.environ.get("ACCELERATE_MIXED_PRECISION"):  # an `accelerate launch` config decided
            return os.environ["ACCELERATE_MIXED_PRECISION"]
        if device_kind in ("cuda", "rocm"):
            import torch

            return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
        return "no"  # CPU/MPS: fp32 (bf16 matmuls are emulated on many CPUs)
    if p == "fp16" and device_kind == "cpu":
        raise MedQAError("--precision fp16 needs a GPU (no fp16 loss scaling on CPU); use fp32 or bf16")
    return {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}[p]


def _to_cpu(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def _full_params(dist_type: str, wrapper):
    """FSDP: gather the full weights on every process (evaluation/export run on the main process only)."""
    if dist_type != "FSDP":
        return contextlib.nullcontext()
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    return FSDP.summon_full_params(wrapper, writeback=False)


def _config_diff(old: dict, new: dict) -> list[str]:
    diffs = []
    for sec, kv in new.items():
        if not isinstance(kv, dict):
            continue
        for k, v in kv.items():
            if sec == "run" or (sec, k) in RESUME_MAY_CHANGE:
                continue
            if old.get(sec, {}).get(k) != v:
                diffs.append(f"{sec}.{k}: {old.get(sec, {}).get(k)!r} -> {v!r}")
    return diffs


class _Interrupt:
    """First Ctrl-C: finish the step, checkpoint, exit.  Second: abort at once."""

    def __init__(self, enabled: bool):
        self.flag = False
        self._old = None
        self.enabled = enabled

    def __enter__(self):
        import threading

        if self.enabled and threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum, frame):
        if self.flag:
            signal.signal(signal.SIGINT, self._old or signal.default_int_handler)
            raise KeyboardInterrupt
        self.flag = True
        print("\nCtrl-C: finishing this step and saving a checkpoint (press again to abort without saving)", flush=True)

    def __exit__(self, *exc):
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)


def default_run_dir() -> Path:
    return Path("runs") / f"train-{time.strftime('%Y%m%d-%H%M%S')}"


def _check_run_dir(cfg: TrainConfig, run_dir: Path) -> Path | None:
    """The latest checkpoint in ``run_dir`` (None: none yet), after checking that ``run_dir`` fits --resume:
    resuming needs the folder and the same config; a fresh run must not land on an existing one."""
    latest = ck.find_latest(run_dir) if run_dir.exists() else None
    if cfg.run.resume:
        if not run_dir.exists():
            raise MedQAError(f"--resume: {run_dir} does not exist; pass the --out folder of the run to continue")
        saved = run_dir / "config.yaml"
        if saved.is_file():
            diffs = _config_diff(TrainConfig.from_yaml(saved).to_dict(), cfg.to_dict())
            if diffs:
                raise MedQAError(f"--resume with a different config ({'; '.join(diffs[:4])}); resume with "
                                 f"--config {saved} (only precision/dtype/device/eval settings may change) or use a new --out")
    elif latest is not None or (run_dir / "adapter").exists():
        raise MedQAError(f"--out {run_dir} already holds a training run; pass --resume to continue it or choose "
                         "another --out")
    return latest


def _optimizer_and_scheduler(cfg: TrainConfig, peft_model, total_steps: int):
    """AdamW over the trainable (LoRA) parameters and the --scheduler learning-rate schedule with warmup."""
    import torch
    from transformers import get_scheduler

    params = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    warmup = math.ceil(cfg.optim.warmup_ratio * total_steps)
    sched_name = {"constant": "constant_with_warmup"}.get(cfg.optim.scheduler, cfg.optim.scheduler)
    scheduler = get_scheduler(sched_name, optimizer, num_warmup_steps=warmup, num_training_steps=total_steps)
    return optimizer, scheduler


def _reset_metrics(mpath: Path, resumed_from: int | None) -> None:
    if resumed_from is not None:  # forget records the crashed run wrote after its last checkpoint
        write_jsonl(mpath, [r for r in read_jsonl_complete(mpath) if r.get("step", 0) <= resumed_from])
    elif mpath.exists():
        mpath.unlink()


def _nonfinite(step_loss: float, grad_norm: float | None, mixed: str) -> str | None:
    """What of this step is NaN/inf (``"loss = nan"``, ``"gradient norm = inf"``), or None when all is finite."""
    if not math.isfinite(step_loss):
        return f"loss = {step_loss}"
    # fp16: the loss scaler skips steps with inf gradients by design (and lowers the scale)
    if grad_norm is not None and not math.isfinite(grad_norm) and mixed != "fp16":
        return f"gradient norm = {grad_norm}"
    return None


def _diverged(what: str, step: int, epoch: int, path: Path | None, run_dir: Path, mixed: str) -> TrainingDiverged:
    """The error for non-finite step ``step + 1``: last good checkpoint ``path``, likely cause, how to go on."""
    hint = ("bf16/fp16 overflow is the usual cause (seen with bf16 on ROCm): add --precision fp32"
            if mixed != "no" else "lower --lr or set --max-grad-norm 1.0")
    return TrainingDiverged(
        f"non-finite training {what} at step {step + 1} (epoch {epoch + 1}); stopped before applying it. "
        f"Last good checkpoint: {path or 'none yet'} (step {step}). {hint}, then continue with "
        f"`medqa train --config {run_dir / 'config.yaml'} --out {run_dir} --resume`")


def _speed(train_seconds: float, cpu_seconds: float, examples: int, tokens: int, supervised: int, device) -> dict:
    """Throughput and peak memory of the training phase, for summary.json."""
    import torch

    from . import run_info

    speed = {"train_seconds": train_seconds, "cpu_seconds_main_process": cpu_seconds,
             "examples": examples, "tokens": tokens, "supervised_tokens": supervised,
             "examples_per_s": examples / max(train_seconds, 1e-9),
             "tokens_per_s": tokens / max(train_seconds, 1e-9),
             "peak_rss_mb": run_info.peak_rss_mb()}
    if torch.cuda.is_available() and device.type == "cuda":
        speed["peak_gpu_mem_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return speed


# ----------------------------------------------------------------------------- the loop


def train(cfg: TrainConfig, command: str = "", train_items: Sequence[MCQItem] | None = None,
          val_items: Sequence[MCQItem] | None = None, bundle=None) -> TrainResult:
    """Train a LoRA adapter as configured.  ``train_items``/``val_items``/``bundle`` override loading
    (benchmarks and tests); everything else comes from ``cfg``."""
    import torch
    from accelerate import Accelerator
    from accelerate.utils import broadcast_object_list, gather_object

    from ..device import detect_device
    from . import run_info

    if cfg.model.threads:
        torch.set_num_threads(cfg.model.threads)
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
    fault = _fault()
    want_cpu = cfg.model.device.lower() == "cpu" or not (torch.cuda.is_available() or cfg.model.device != "auto")
    probe_kind = "cpu" if want_cpu else detect_device(cfg.model.device if not os.environ.get("LOCAL_RANK") else "auto").kind
    mixed = _precision(cfg, probe_kind)
    acc = Accelerator(mixed_precision=mixed, cpu=want_cpu)
    world, rank, main = acc.num_processes, acc.process_index, acc.is_main_process
    dist_type = str(acc.distributed_type).split(".")[-1]
    if dist_type == "DEEPSPEED" and cfg.optim.grad_accum > 1:
        raise MedQAError("--grad-accum must be 1 under DeepSpeed (its engine steps at every backward); raise "
                         "--batch-size instead, see configs/accelerate/deepspeed_zero2.yaml")

    # ---- run folder (same on every process)
    run_dir = [str(Path(cfg.run.out) if cfg.run.out else default_run_dir())]
    broadcast_object_list(run_dir)
    run_dir = Path(run_dir[0])
    latest = _check_run_dir(cfg, run_dir)
    if main:
        run_dir.mkdir(parents=True, exist_ok=True)
    acc.wait_for_everyone()

    # ---- model
    bundle, peft_model, targets, layers = _lora_model(cfg, bundle, acc, mixed, dist_type)
    tok = bundle.tokenizer
    n_train_params, n_total = count_parameters(peft_model)

    # ---- data
    train_items, val_items, data_info = resolve_items(cfg, train_items, val_items)
    encoder = ExampleEncoder(tok, cfg.data.max_length, cfg.data.with_explanation)
    per_epoch = EpochExamples(train_items, encoder, cfg.data.permute_options, cfg.optim.seed)
    examples, stats = per_epoch.base, per_epoch.stats
    if not examples:
        raise MedQAError("no labelled training items")
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    collator = SupervisedCollator(pad_id, cfg.data.train_on_prompt, cfg.data.letter_weight, cfg.data.answer_weight,
                                  cfg.data.explanation_weight)
    plan = BatchPlan([e.length for e in examples], cfg.optim.batch_size, world, cfg.optim.seed,
                     cfg.data.group_by_length)
    bpe = plan.batches_per_epoch()
    if bpe == 0:
        raise MedQAError(f"{len(examples)} examples are fewer than one batch per process ({world} processes)")
    ga = cfg.optim.grad_accum
    spe = steps_per_epoch(bpe, ga)
    total_steps = cfg.optim.max_steps or max(1, math.ceil(cfg.optim.epochs * spe))
    eval_enabled = cfg.eval.every >= 0 and len(val_items) > 0
    eval_every = cfg.eval.every if cfg.eval.every > 0 else spe

    # ---- optimizer, schedule, wrapping
    optimizer, scheduler = _optimizer_and_scheduler(cfg, peft_model, total_steps)
    wrapper = _module_class()(peft_model)
    wrapper.train()
    wrapper, optimizer = acc.prepare(wrapper, optimizer)
    scaler = getattr(acc, "scaler", None)
    sharded = dist_type in ("FSDP", "DEEPSPEED")
    params = [p for p in acc.unwrap_model(wrapper).parameters() if p.requires_grad]

    # ---- state / resume
    step, best_acc, best_nll, best_step, bad_evals = 0, None, None, None, 0
    resumed_from = None
    if cfg.run.resume and latest is not None:
        st = ck.load_checkpoint(latest, peft_model=peft_model, optimizer=optimizer, scheduler=scheduler,
                                scaler=scaler, rank=rank)
        step, best_acc, best_nll = st["step"], st.get("best_accuracy"), st.get("best_nll")
        best_step, bad_evals, resumed_from = st.get("best_step"), st.get("bad_evals", 0), st["step"]
    elif cfg.run.resume:
        log.warning("--resume: no checkpoint in %s yet, starting from step 0", run_dir)
    if main:
        if resumed_from is None or not (run_dir / "config.yaml").exists():
            cfg.to_yaml(run_dir / "config.yaml", command=command)
        info = run_info.collect(command, {"kind": probe_kind, "device": str(acc.device), "precision": mixed,
                                          "distributed": dist_type}, world)
        info.update({"trainable_parameters": n_train_params, "total_parameters": n_total,
                     "target_modules": targets, "lora_layers": layers, "data": data_info,
                     "encode_stats": {k: v for k, v in vars(stats).items() if k != "notes"},
                     "resumed_from_step": resumed_from})
        atomic_write_json(run_dir / ("run_info.json" if resumed_from is None else f"run_info.resume-{resumed_from}.json"), info)
        _reset_metrics(run_dir / "metrics.jsonl", resumed_from)
        print(f"model {bundle.model_id} on {acc.device} ({dist_type}, {world} process{'es' * (world > 1)}), "
              f"precision {'fp32' if mixed == 'no' else mixed}; LoRA r={cfg.lora.r} alpha={cfg.lora.alpha:g} on "
              f"{','.join(targets)}{f' layers {layers[0]}-{layers[-1]}' if layers else ''}")
        print(f"trainable parameters: {n_train_params:,} of {n_total:,} ({100 * n_train_params / n_total:.2f}%)")
        print(f"data: {data_info.get('n_train')} train / {len(val_items)} val items; {stats.summary()}")
        print(f"{total_steps} optimizer steps ({spe}/epoch, effective batch {cfg.optim.batch_size * ga * world}); "
              f"run folder {run_dir}" + (f"; resuming at step {step}" if resumed_from is not None else ""))
    metrics = JsonlAppender(run_dir / "metrics.jsonl") if main else None

    # ---- helpers bound to this run
    def save(at_step: int, **extra) -> Path | None:
        rngs = gather_object([ck.rng_state()]) if world > 1 else [ck.rng_state()]
        e, b = divmod(at_step, spe)
        state = ck.trainer_state(at_step, e, b * ga, best_accuracy=best_acc, best_nll=best_nll, best_step=best_step,
                                 bad_evals=bad_evals, total_steps=total_steps, world_size=world, **extra)
        adapter_state, opt_state = None, None
        if sharded:  # every process holds a shard: gather (collective calls, on all ranks)
            adapter_state = _lora_state(acc, wrapper)
            opt_state = {"per_rank": gather_object([_to_cpu(optimizer.state_dict())])}
        path = None
        if main:
            path = ck.save_checkpoint(run_dir, at_step, peft_model=peft_model,
                                      optimizer_state=opt_state or optimizer.state_dict(), scheduler=scheduler,
                                      scaler=scaler, rng_states=rngs, trainer_state=state, keep=cfg.run.keep_checkpoints,
                                      adapter_state=adapter_state)
        acc.wait_for_everyone()
        return path

    last_pred_counts: dict[str, int] = {}  # predicted-letter histogram of the last evaluation (collapse check)

    def evaluate() -> tuple[float, float, list[list[float]]]:
        from ..scoring.hf import HFScorer

        peft_model.eval()
        try:
            with acc.autocast():
                rows = HFScorer(peft_model, tok, style="medqa", batch_size=cfg.eval.batch_size).score(val_items)
        finally:
            peft_model.train()
        preds = [max(range(len(r)), key=r.__getitem__) for r in rows]
        last_pred_counts.clear()
        last_pred_counts.update({L: preds.count(i) for i, L in enumerate("ABCDE") if preds.count(i)})
        nll = -sum(r[it.answer] for r, it in zip(rows, val_items)) / len(rows)
        return sum(p == it.answer for p, it in zip(preds, val_items)) / len(rows), nll, rows

    def validate() -> None:
        """Validation accuracy now; keep the best adapter (ties: lower NLL); count evaluations without progress."""
        nonlocal best_acc, best_nll, best_step, bad_evals, best_rows
        verdict: list[Any] = [None]
        rows = None
        with _full_params(dist_type, wrapper):  # FSDP: every process gathers the weights
            if main:
                te = time.perf_counter()
                acc_v, nll_v, rows = evaluate()
                improved = best_acc is None or acc_v > best_acc or (acc_v == best_acc and nll_v < best_nll)
                verdict = [(improved, acc_v, nll_v, time.perf_counter() - te)]
        broadcast_object_list(verdict)
        improved, acc_v, nll_v, secs = verdict[0]
        if improved:
            best_acc, best_nll, best_step, bad_evals = acc_v, nll_v, step, 0
            best_rows = rows if main else None
        else:
            bad_evals += 1
        best_state = _lora_state(acc, wrapper) if (improved and sharded) else None
        if main:
            if improved:
                with atomic_dir(run_dir / "best") as tmp:
                    ck.save_adapter(peft_model, tmp, best_state)
                    atomic_write_json(tmp / "best.json", {"step": step, "val_accuracy": acc_v, "val_nll": nll_v})
            metrics.write({"type": "eval", "step": step, "epoch": round(step / spe, 4), "val_accuracy": acc_v,
                           "val_nll": nll_v, "n": len(val_items), "is_best": improved, "seconds": secs,
                           "predicted_letters": dict(last_pred_counts)})
            what = "before training (the base model)" if step == 0 else f"step {step}"
            bar.write(f"{what}: val accuracy {acc_v:.2%} (nll {nll_v:.3f})"
                      f"{' *best*' if improved else f', best {best_acc:.2%} at step {best_step}'}")

    # ---- train
    stop = "completed"
    best_rows: list[list[float]] | None = None
    seen_tokens = seen_examples = seen_supervised = 0
    from tqdm.auto import tqdm

    bar = tqdm(total=total_steps, initial=step, disable=not (main and cfg.run.progress), unit="step",
               dynamic_ncols=True, desc="train")
    if eval_enabled and step == 0:  # the base model is candidate "step 0": an adapter must beat it to be kept
        validate()
    t0, t_cpu0 = time.perf_counter(), time.process_time()  # (periodic validation below is included)
    interrupt = _Interrupt(enabled=True)
    with interrupt:
        while step < total_steps:
            epoch, k = divmod(step, spe)
            epoch_examples = per_epoch.get(epoch)
            global_batches = [[epoch_examples[i] for i in b] for b in plan.epoch(epoch)[k * ga:(k + 1) * ga]]
            total_w = sum(collator.total_weight(b) for b in global_batches)
            local_loss = torch.zeros((), dtype=torch.float32, device=acc.device)
            for j, gb in enumerate(global_batches):
                mine = [gb[i] for i in plan.rank_slice(range(len(gb)), rank)]
                batch = collator(mine)
                inputs = {k2: batch[k2].to(acc.device) for k2 in ("input_ids", "attention_mask", "rows", "cols",
                                                                   "targets", "weights")}
                sync = j == len(global_batches) - 1
                with (contextlib.nullcontext() if sync or world == 1 else acc.no_sync(wrapper)):
                    loss_sum, _ce = wrapper(**inputs)
                    if fault.get("nan") == step + 1:
                        loss_sum = loss_sum * float("nan")
                    acc.backward(loss_sum * (world / max(total_w, 1e-12)))
                local_loss += loss_sum.detach().float()
            loss_total = acc.reduce(local_loss.clone(), "sum") if world > 1 else local_loss
            step_loss = float(loss_total) / max(total_w, 1e-12)
            grad_norm = acc.clip_grad_norm_(params, cfg.optim.max_grad_norm if cfg.optim.max_grad_norm > 0 else float("inf"))
            grad_norm = float(grad_norm) if grad_norm is not None else None  # DeepSpeed clips inside its engine
            what = _nonfinite(step_loss, grad_norm, mixed)
            if what is not None:  # stop before the bad update, keeping the last good state
                optimizer.zero_grad(set_to_none=True)
                finite = all(bool(torch.isfinite(p).all()) for p in params)
                path = save(step, stopped="nonfinite") if finite else ck.find_latest(run_dir)
                bar.close()
                raise _diverged(what, step, epoch, path, run_dir, mixed)
            optimizer.step()
            if not acc.optimizer_step_was_skipped:
                scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            n_ex = sum(len(b) for b in global_batches)
            n_tok = sum(e.length for b in global_batches for e in b)
            seen_examples += n_ex
            seen_tokens += n_tok
            seen_supervised += sum(e.n_answer + e.n_expl + e.n_eos for b in global_batches for e in b)
            elapsed = time.perf_counter() - t0
            lr = scheduler.get_last_lr()[0]
            if main:
                bar.update(1)
                bar.set_postfix(loss=f"{step_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{seen_tokens / elapsed:.0f}",
                                refresh=False)
                if step % cfg.run.log_every == 0 or step == total_steps:
                    metrics.write({"type": "train", "step": step, "epoch": round(step / spe, 4), "loss": step_loss,
                                   "lr": lr, "grad_norm": grad_norm, "examples": n_ex, "tokens": n_tok,
                                   "tokens_per_s": seen_tokens / elapsed, "examples_per_s": seen_examples / elapsed,
                                   "elapsed_s": elapsed})
            if fault.get("crash") == step:
                os._exit(137)
            # -- evaluation, best checkpoint, early stopping
            if eval_enabled and (step % eval_every == 0 or step == total_steps):
                validate()
                if cfg.eval.patience and bad_evals >= cfg.eval.patience:
                    stop = "early_stopping"
                    if main:
                        bar.write(f"early stopping: {bad_evals} evaluations without improvement")
            # -- checkpoint / interrupt
            flag = torch.tensor(float(interrupt.flag), device=acc.device)
            if world > 1:
                flag = acc.reduce(flag, "sum")
            if float(flag) > 0:
                stop = "interrupted"
            if stop != "completed" or step == total_steps or (cfg.run.save_every and step % cfg.run.save_every == 0):
                save(step)
            if stop != "completed":
                break
    bar.close()
    train_seconds = time.perf_counter() - t0
    cpu_seconds = time.process_time() - t_cpu0
    if metrics:
        metrics.close()

    speed = _speed(train_seconds, cpu_seconds, seen_examples, seen_tokens, seen_supervised, acc.device)
    result = TrainResult(run_dir, None, stop, step, best_step, best_acc)
    if stop == "interrupted":
        if main:
            print(f"interrupted at step {step}: checkpoint saved in {ck.find_latest(run_dir)}; continue with\n"
                  f"  medqa train --config {run_dir / 'config.yaml'} --out {run_dir} --resume")
        result.summary = {"stopped": stop, "step": step, **speed}
        return result

    # ---- finish: final adapter (= best by validation accuracy), calibration, report
    with _full_params(dist_type, wrapper):
        if main:
            result = _finish(cfg, run_dir, peft_model, tok, val_items, best_rows, result, speed, stats, data_info,
                             targets, n_train_params, evaluate if eval_enabled else None, bundle, acc, command)
    acc.wait_for_everyone()
    return result
