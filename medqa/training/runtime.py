"""Run-time helpers of the training loop: precision choice, run-folder checks for --resume, the NaN guard's
verdict and error, Ctrl-C handling, throughput, and the MEDQA_FAULT test hooks."""
from __future__ import annotations

import contextlib
import math
import os
import signal
import time
from pathlib import Path

from ..records import MedQAError
from ..utils.io import read_jsonl_complete, write_jsonl
from . import checkpoint as ck
from .config import TrainConfig

#: config keys that may differ between a run and its --resume (they do not change the math of a step)
RESUME_MAY_CHANGE = {("model", "precision"), ("model", "dtype"), ("model", "device"), ("model", "threads"),
                     ("eval", "batch_size"), ("eval", "task"), ("eval", "limit"), ("eval", "calibrate")}


class TrainingDiverged(MedQAError):
    """The loss or gradient became NaN/inf; the message names the last good checkpoint."""


def fault_hooks() -> dict[str, int]:
    spec = os.environ.get("MEDQA_FAULT", "")
    out = {}
    for part in filter(None, spec.split(",")):
        kind, _, at = part.partition("@")
        if kind in ("nan", "crash") and at.isdigit():
            out[kind] = int(at)
    return out


def mixed_precision(cfg: TrainConfig, device_kind: str) -> str:
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


def to_cpu(obj):
    import torch

    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj


def full_params(dist_type: str, wrapper):
    """FSDP: gather the full weights on every process (evaluation/export run on the main process only)."""
    if dist_type != "FSDP":
        return contextlib.nullcontext()
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    return FSDP.summon_full_params(wrapper, writeback=False)


def config_diff(old: dict, new: dict) -> list[str]:
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


class Interrupt:
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


def check_run_dir(cfg: TrainConfig, run_dir: Path) -> Path | None:
    """The latest checkpoint in ``run_dir`` (None: none yet), after checking that ``run_dir`` fits --resume:
    resuming needs the folder and the same config; a fresh run must not land on an existing one."""
    latest = ck.find_latest(run_dir) if run_dir.exists() else None
    if cfg.run.resume:
        if not run_dir.exists():
            raise MedQAError(f"--resume: {run_dir} does not exist; pass the --out folder of the run to continue")
        saved = run_dir / "config.yaml"
        if saved.is_file():
            diffs = config_diff(TrainConfig.from_yaml(saved).to_dict(), cfg.to_dict())
            if diffs:
                raise MedQAError(f"--resume with a different config ({'; '.join(diffs[:4])}); resume with "
                                 f"--config {saved} (only precision/dtype/device/eval settings may change) or use a new --out")
    elif latest is not None or (run_dir / "adapter").exists():
        raise MedQAError(f"--out {run_dir} already holds a training run; pass --resume to continue it or choose "
                         "another --out")
    return latest


def optimizer_and_scheduler(cfg: TrainConfig, peft_model, total_steps: int):
    """AdamW over the trainable (LoRA) parameters and the --scheduler learning-rate schedule with warmup."""
    import torch
    from transformers import get_scheduler

    params = [p for p in peft_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
    warmup = math.ceil(cfg.optim.warmup_ratio * total_steps)
    sched_name = {"constant": "constant_with_warmup"}.get(cfg.optim.scheduler, cfg.optim.scheduler)
    scheduler = get_scheduler(sched_name, optimizer, num_warmup_steps=warmup, num_training_steps=total_steps)
    return optimizer, scheduler


def reset_metrics(mpath: Path, resumed_from: int | None) -> None:
    if resumed_from is not None:  # forget records the crashed run wrote after its last checkpoint
        write_jsonl(mpath, [r for r in read_jsonl_complete(mpath) if r.get("step", 0) <= resumed_from])
    elif mpath.exists():
        mpath.unlink()


def nonfinite(step_loss: float, grad_norm: float | None, mixed: str) -> str | None:
    """What of this step is NaN/inf (``"loss = nan"``, ``"gradient norm = inf"``), or None when all is finite."""
    if not math.isfinite(step_loss):
        return f"loss = {step_loss}"
    # fp16: the loss scaler skips steps with inf gradients by design (and lowers the scale)
    if grad_norm is not None and not math.isfinite(grad_norm) and mixed != "fp16":
        return f"gradient norm = {grad_norm}"
    return None


def diverged(what: str, step: int, epoch: int, path: Path | None, run_dir: Path, mixed: str) -> TrainingDiverged:
    """The error for non-finite step ``step + 1``: last good checkpoint ``path``, likely cause, how to go on."""
    hint = ("bf16/fp16 overflow is the usual cause (seen with bf16 on ROCm): add --precision fp32"
            if mixed != "no" else "lower --lr or set --max-grad-norm 1.0")
    return TrainingDiverged(
        f"non-finite training {what} at step {step + 1} (epoch {epoch + 1}); stopped before applying it. "
        f"Last good checkpoint: {path or 'none yet'} (step {step}). {hint}, then continue with "
        f"`medqa train --config {run_dir / 'config.yaml'} --out {run_dir} --resume`")


def speed_summary(train_seconds: float, cpu_seconds: float, examples: int, tokens: int, supervised: int, device) -> dict:
    """Throughput and peak memory of the training phase, for summary.json."""
    from . import run_info

    speed = {"train_seconds": train_seconds, "cpu_seconds_main_process": cpu_seconds,
             "examples": examples, "tokens": tokens, "supervised_tokens": supervised,
             "examples_per_s": examples / max(train_seconds, 1e-9),
             "tokens_per_s": tokens / max(train_seconds, 1e-9),
             "peak_rss_mb": run_info.peak_rss_mb()}
    gpu = run_info.peak_gpu_mb(device)
    if gpu is not None:
        speed["peak_gpu_mem_mb"] = gpu
    return speed
