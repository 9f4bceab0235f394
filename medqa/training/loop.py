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
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..records import MCQItem, MedQAError
from ..utils.io import JsonlAppender, atomic_dir, atomic_write_json
from . import checkpoint as ck
from .config import TrainConfig
from .data import load_training_items, resolve_items
from .finish import evaluate_on_task, finish_run, push_to_hub
from .lora import (_lora_model, _lora_state, _module_class, add_lora, count_parameters, linear_module_names,
                   n_layers, resolve_target_modules)
from .runtime import (Interrupt, TrainingDiverged, check_run_dir, default_run_dir, diverged, fault_hooks,
                      full_params, mixed_precision, nonfinite, optimizer_and_scheduler, reset_metrics, speed_summary,
                      to_cpu)
from .tokenize import BatchPlan, EpochExamples, ExampleEncoder, SupervisedCollator, steps_per_epoch

# the model pieces, data loading, run-time helpers and post-training steps live in lora.py, data.py, runtime.py
# and finish.py; they stay importable from here, where callers have always found them
__all__ = ["TrainResult", "TrainingDiverged", "add_lora", "count_parameters", "default_run_dir",
           "evaluate_on_task", "linear_module_names", "load_training_items", "n_layers", "push_to_hub",
           "resolve_target_modules", "train"]

log = logging.getLogger(__name__)


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


def train(cfg: TrainConfig, command: str = "", train_items: Sequence[MCQItem] | None = None,
          val_items: Sequence[MCQItem] | None = None, bundle=None) -> TrainResult:
    """Train a LoRA adapter as configured.  ``train_items``/``val_items``/``bundle`` override loading
    (benchmarks and tests); everything else comes from ``cfg``."""
    run = _Run(cfg, command)  # accelerator, run folder
    run.setup_model(bundle)
    run.setup_data(train_items, val_items)
    run.setup_optimizer()
    run.restore()  # --resume: weights, optimizer, scheduler, RNG, data position
    run.announce()
    stop = run.fit()
    return run.finish(stop)


class _Run:
    """One training run: its accelerator, model, data plan, optimizer and the state a checkpoint keeps.
    :func:`train` calls the phases top to bottom; every process of a distributed run holds one."""

    def __init__(self, cfg: TrainConfig, command: str):
        import torch
        from accelerate import Accelerator
        from accelerate.utils import broadcast_object_list

        from ..device import detect_device

        self.cfg, self.command = cfg, command
        if cfg.model.threads:
            torch.set_num_threads(cfg.model.threads)
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        self.fault = fault_hooks()
        want_cpu = cfg.model.device.lower() == "cpu" or not (torch.cuda.is_available() or cfg.model.device != "auto")
        self.device_kind = "cpu" if want_cpu else detect_device(
            cfg.model.device if not os.environ.get("LOCAL_RANK") else "auto").kind
        self.mixed = mixed_precision(cfg, self.device_kind)
        self.acc = acc = Accelerator(mixed_precision=self.mixed, cpu=want_cpu)
        self.world, self.rank, self.main = acc.num_processes, acc.process_index, acc.is_main_process
        self.dist_type = str(acc.distributed_type).split(".")[-1]
        self.sharded = self.dist_type in ("FSDP", "DEEPSPEED")
        if self.dist_type == "DEEPSPEED" and cfg.optim.grad_accum > 1:
            raise MedQAError("--grad-accum must be 1 under DeepSpeed (its engine steps at every backward); raise "
                             "--batch-size instead, see configs/accelerate/deepspeed_zero2.yaml")
        run_dir = [str(Path(cfg.run.out) if cfg.run.out else default_run_dir())]  # the same on every process
        broadcast_object_list(run_dir)
        self.run_dir = Path(run_dir[0])
        self.latest = check_run_dir(cfg, self.run_dir)
        if self.main:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        acc.wait_for_everyone()
        # what a checkpoint keeps, besides weights/optimizer/scheduler/RNG
        self.step, self.best_acc, self.best_nll, self.best_step, self.bad_evals = 0, None, None, None, 0
        self.resumed_from: int | None = None
        self.best_rows: list[list[float]] | None = None  # validation scores of the best adapter (for calibration)
        self.last_pred_counts: dict[str, int] = {}  # predicted-letter histogram of the last evaluation
        self.seen = {"examples": 0, "tokens": 0, "supervised": 0}
        self.metrics: JsonlAppender | None = None
        self.bar = None

    # ------------------------------------------------------------------ setup

    def setup_model(self, bundle) -> None:
        self.bundle, self.peft_model, self.targets, self.layers = _lora_model(self.cfg, bundle, self.acc, self.mixed,
                                                                              self.dist_type)
        self.tok = self.bundle.tokenizer
        self.n_train_params, self.n_total = count_parameters(self.peft_model)

    def setup_data(self, train_items, val_items) -> None:
        cfg, tok = self.cfg, self.tok
        train_items, self.val_items, self.data_info = resolve_items(cfg, train_items, val_items)
        encoder = ExampleEncoder(tok, cfg.data.max_length, cfg.data.with_explanation)
        self.per_epoch = EpochExamples(train_items, encoder, cfg.data.permute_options, cfg.optim.seed)
        examples, self.stats = self.per_epoch.base, self.per_epoch.stats
        if not examples:
            raise MedQAError("no labelled training items")
        pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        self.collator = SupervisedCollator(pad_id, cfg.data.train_on_prompt, cfg.data.letter_weight,
                                           cfg.data.answer_weight, cfg.data.explanation_weight)
        self.plan = BatchPlan([e.length for e in examples], cfg.optim.batch_size, self.world, cfg.optim.seed,
                              cfg.data.group_by_length)
        bpe = self.plan.batches_per_epoch()
        if bpe == 0:
            raise MedQAError(f"{len(examples)} examples are fewer than one batch per process ({self.world} processes)")
        self.ga = cfg.optim.grad_accum
        self.spe = steps_per_epoch(bpe, self.ga)
        self.total_steps = cfg.optim.max_steps or max(1, math.ceil(cfg.optim.epochs * self.spe))
        self.eval_enabled = cfg.eval.every >= 0 and len(self.val_items) > 0
        self.eval_every = cfg.eval.every if cfg.eval.every > 0 else self.spe

    def setup_optimizer(self) -> None:
        self.optimizer, self.scheduler = optimizer_and_scheduler(self.cfg, self.peft_model, self.total_steps)
        wrapper = _module_class()(self.peft_model)
        wrapper.train()
        self.wrapper, self.optimizer = self.acc.prepare(wrapper, self.optimizer)
        self.scaler = getattr(self.acc, "scaler", None)
        self.params = [p for p in self.acc.unwrap_model(self.wrapper).parameters() if p.requires_grad]

    def restore(self) -> None:
        if self.cfg.run.resume and self.latest is not None:
            st = ck.load_checkpoint(self.latest, peft_model=self.peft_model, optimizer=self.optimizer,
                                    scheduler=self.scheduler, scaler=self.scaler, rank=self.rank)
            self.step, self.best_acc, self.best_nll = st["step"], st.get("best_accuracy"), st.get("best_nll")
            self.best_step, self.bad_evals, self.resumed_from = st.get("best_step"), st.get("bad_evals", 0), st["step"]
        elif self.cfg.run.resume:
            log.warning("--resume: no checkpoint in %s yet, starting from step 0", self.run_dir)

    def announce(self) -> None:
        """Main process: config.yaml, run_info.json, metrics.jsonl reset, and what is about to happen."""
        from . import run_info

        if not self.main:
            return
        cfg, run_dir, resumed_from = self.cfg, self.run_dir, self.resumed_from
        if resumed_from is None or not (run_dir / "config.yaml").exists():
            cfg.to_yaml(run_dir / "config.yaml", command=self.command)
        info = run_info.collect(self.command, {"kind": self.device_kind, "device": str(self.acc.device),
                                               "precision": self.mixed, "distributed": self.dist_type}, self.world)
        info.update({"trainable_parameters": self.n_train_params, "total_parameters": self.n_total,
                     "target_modules": self.targets, "lora_layers": self.layers, "data": self.data_info,
                     "encode_stats": {k: v for k, v in vars(self.stats).items() if k != "notes"},
                     "resumed_from_step": resumed_from})
        name = "run_info.json" if resumed_from is None else f"run_info.resume-{resumed_from}.json"
        atomic_write_json(run_dir / name, info)
        reset_metrics(run_dir / "metrics.jsonl", resumed_from)
        layers, world = self.layers, self.world
        print(f"model {self.bundle.model_id} on {self.acc.device} ({self.dist_type}, {world} "
              f"process{'es' * (world > 1)}), precision {'fp32' if self.mixed == 'no' else self.mixed}; LoRA "
              f"r={cfg.lora.r} alpha={cfg.lora.alpha:g} on {','.join(self.targets)}"
              f"{f' layers {layers[0]}-{layers[-1]}' if layers else ''}")
        print(f"trainable parameters: {self.n_train_params:,} of {self.n_total:,} "
              f"({100 * self.n_train_params / self.n_total:.2f}%)")
        print(f"data: {self.data_info.get('n_train')} train / {len(self.val_items)} val items; {self.stats.summary()}")
        print(f"{self.total_steps} optimizer steps ({self.spe}/epoch, effective batch "
              f"{cfg.optim.batch_size * self.ga * world}); run folder {run_dir}"
              + (f"; resuming at step {self.step}" if resumed_from is not None else ""))
        self.metrics = JsonlAppender(run_dir / "metrics.jsonl")

    # ------------------------------------------------------------------ checkpoint and validation

    def save(self, at_step: int, **extra) -> Path | None:
        """An atomic checkpoint of step ``at_step`` (collective: every process calls it)."""
        from accelerate.utils import gather_object

        rngs = gather_object([ck.rng_state()]) if self.world > 1 else [ck.rng_state()]
        e, b = divmod(at_step, self.spe)
        state = ck.trainer_state(at_step, e, b * self.ga, best_accuracy=self.best_acc, best_nll=self.best_nll,
                                 best_step=self.best_step, bad_evals=self.bad_evals, total_steps=self.total_steps,
                                 world_size=self.world, **extra)
        adapter_state, opt_state = None, None
        if self.sharded:  # every process holds a shard: gather (collective calls, on all ranks)
            adapter_state = _lora_state(self.acc, self.wrapper)
            opt_state = {"per_rank": gather_object([to_cpu(self.optimizer.state_dict())])}
        path = None
        if self.main:
            path = ck.save_checkpoint(self.run_dir, at_step, peft_model=self.peft_model,
                                      optimizer_state=opt_state or self.optimizer.state_dict(),
                                      scheduler=self.scheduler, scaler=self.scaler, rng_states=rngs,
                                      trainer_state=state, keep=self.cfg.run.keep_checkpoints,
                                      adapter_state=adapter_state)
        self.acc.wait_for_everyone()
        return path

    def evaluate(self) -> tuple[float, float, list[list[float]]]:
        """Validation accuracy, NLL and per-item log-probs of the current adapter (main process)."""
        from ..scoring.hf import HFScorer

        val_items = self.val_items
        self.peft_model.eval()
        try:
            with self.acc.autocast():
                rows = HFScorer(self.peft_model, self.tok, style="medqa",
                                batch_size=self.cfg.eval.batch_size).score(val_items)
        finally:
            self.peft_model.train()
        preds = [max(range(len(r)), key=r.__getitem__) for r in rows]
        self.last_pred_counts = {L: preds.count(i) for i, L in enumerate("ABCDE") if preds.count(i)}
        nll = -sum(r[it.answer] for r, it in zip(rows, val_items)) / len(rows)
        return sum(p == it.answer for p, it in zip(preds, val_items)) / len(rows), nll, rows

    def validate(self) -> None:
        """Validation accuracy now; keep the best adapter (ties: lower NLL); count evaluations without progress."""
        from accelerate.utils import broadcast_object_list

        verdict: list[Any] = [None]
        rows = None
        with full_params(self.dist_type, self.wrapper):  # FSDP: every process gathers the weights
            if self.main:
                te = time.perf_counter()
                acc_v, nll_v, rows = self.evaluate()
                improved = self.best_acc is None or acc_v > self.best_acc or (acc_v == self.best_acc
                                                                               and nll_v < self.best_nll)
                verdict = [(improved, acc_v, nll_v, time.perf_counter() - te)]
        broadcast_object_list(verdict)
        improved, acc_v, nll_v, secs = verdict[0]
        if improved:
            self.best_acc, self.best_nll, self.best_step, self.bad_evals = acc_v, nll_v, self.step, 0
            self.best_rows = rows if self.main else None
        else:
            self.bad_evals += 1
        best_state = _lora_state(self.acc, self.wrapper) if (improved and self.sharded) else None
        if not self.main:
            return
        step = self.step
        if improved:
            with atomic_dir(self.run_dir / "best") as tmp:
                ck.save_adapter(self.peft_model, tmp, best_state)
                atomic_write_json(tmp / "best.json", {"step": step, "val_accuracy": acc_v, "val_nll": nll_v})
        self.metrics.write({"type": "eval", "step": step, "epoch": round(step / self.spe, 4), "val_accuracy": acc_v,
                            "val_nll": nll_v, "n": len(self.val_items), "is_best": improved, "seconds": secs,
                            "predicted_letters": dict(self.last_pred_counts)})
        what = "before training (the base model)" if step == 0 else f"step {step}"
        self.bar.write(f"{what}: val accuracy {acc_v:.2%} (nll {nll_v:.3f})"
                       f"{' *best*' if improved else f', best {self.best_acc:.2%} at step {self.best_step}'}")

    # ------------------------------------------------------------------ fit

    def fit(self) -> str:
        """Optimizer steps until done, early stopping or Ctrl-C; returns why it stopped."""
        from tqdm.auto import tqdm

        self.bar = tqdm(total=self.total_steps, initial=self.step, disable=not (self.main and self.cfg.run.progress),
                        unit="step", dynamic_ncols=True, desc="train")
        if self.eval_enabled and self.step == 0:  # the base model is candidate "step 0": an adapter must beat it
            self.validate()
        self.t0, t_cpu0 = time.perf_counter(), time.process_time()  # (periodic validation below is included)
        stop = "completed"
        with Interrupt(enabled=True) as interrupt:
            while self.step < self.total_steps:
                step_loss, grad_norm, batches = self._optimizer_step()
                self.step += 1
                self._log_step(step_loss, grad_norm, batches)
                if self.fault.get("crash") == self.step:
                    os._exit(137)
                stop = self._after_step(interrupt)
                if stop != "completed":
                    break
        self.bar.close()
        self.train_seconds, self.cpu_seconds = time.perf_counter() - self.t0, time.process_time() - t_cpu0
        if self.metrics:
            self.metrics.close()
        return stop

    def _optimizer_step(self):
        """Forward/backward over this step's batches (grad accumulation, DDP no_sync), NaN guard, update.
        Returns the step's normalised loss, gradient norm and its global batches."""
        import torch

        acc, step, ga, world = self.acc, self.step, self.ga, self.world
        epoch, k = divmod(step, self.spe)
        epoch_examples = self.per_epoch.get(epoch)
        global_batches = [[epoch_examples[i] for i in b] for b in self.plan.epoch(epoch)[k * ga:(k + 1) * ga]]
        total_w = sum(self.collator.total_weight(b) for b in global_batches)
        local_loss = torch.zeros((), dtype=torch.float32, device=acc.device)
        for j, gb in enumerate(global_batches):
            batch = self.collator([gb[i] for i in self.plan.rank_slice(range(len(gb)), self.rank)])
            inputs = {key: batch[key].to(acc.device) for key in ("input_ids", "attention_mask", "rows", "cols",
                                                                  "targets", "weights")}
            sync = j == len(global_batches) - 1
            with (contextlib.nullcontext() if sync or world == 1 else acc.no_sync(self.wrapper)):
                loss_sum, _ce = self.wrapper(**inputs)
                if self.fault.get("nan") == step + 1:
                    loss_sum = loss_sum * float("nan")
                acc.backward(loss_sum * (world / max(total_w, 1e-12)))
            local_loss += loss_sum.detach().float()
        loss_total = acc.reduce(local_loss.clone(), "sum") if world > 1 else local_loss
        step_loss = float(loss_total) / max(total_w, 1e-12)
        max_norm = self.cfg.optim.max_grad_norm if self.cfg.optim.max_grad_norm > 0 else float("inf")
        grad_norm = acc.clip_grad_norm_(self.params, max_norm)
        grad_norm = float(grad_norm) if grad_norm is not None else None  # DeepSpeed clips inside its engine
        what = nonfinite(step_loss, grad_norm, self.mixed)
        if what is not None:  # stop before the bad update, keeping the last good state
            self.optimizer.zero_grad(set_to_none=True)
            finite = all(bool(torch.isfinite(p).all()) for p in self.params)
            path = self.save(step, stopped="nonfinite") if finite else ck.find_latest(self.run_dir)
            self.bar.close()
            raise diverged(what, step, epoch, path, self.run_dir, self.mixed)
        self.optimizer.step()
        if not acc.optimizer_step_was_skipped:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return step_loss, grad_norm, global_batches

    def _log_step(self, step_loss: float, grad_norm: float | None, global_batches) -> None:
        n_ex = sum(len(b) for b in global_batches)
        n_tok = sum(e.length for b in global_batches for e in b)
        seen = self.seen
        seen["examples"] += n_ex
        seen["tokens"] += n_tok
        seen["supervised"] += sum(e.n_answer + e.n_expl + e.n_eos for b in global_batches for e in b)
        if not self.main:
            return
        elapsed, lr, step = time.perf_counter() - self.t0, self.scheduler.get_last_lr()[0], self.step
        self.bar.update(1)
        self.bar.set_postfix(loss=f"{step_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{seen['tokens'] / elapsed:.0f}",
                             refresh=False)
        if step % self.cfg.run.log_every == 0 or step == self.total_steps:
            self.metrics.write({"type": "train", "step": step, "epoch": round(step / self.spe, 4), "loss": step_loss,
                                "lr": lr, "grad_norm": grad_norm, "examples": n_ex, "tokens": n_tok,
                                "tokens_per_s": seen["tokens"] / elapsed,
                                "examples_per_s": seen["examples"] / elapsed, "elapsed_s": elapsed})

    def _after_step(self, interrupt: Interrupt) -> str:
        """Validation (best adapter, early stopping), Ctrl-C on any process, checkpoint; returns the stop reason."""
        import torch

        stop, step = "completed", self.step
        if self.eval_enabled and (step % self.eval_every == 0 or step == self.total_steps):
            self.validate()
            if self.cfg.eval.patience and self.bad_evals >= self.cfg.eval.patience:
                stop = "early_stopping"
                if self.main:
                    self.bar.write(f"early stopping: {self.bad_evals} evaluations without improvement")
        flag = torch.tensor(float(interrupt.flag), device=self.acc.device)
        if self.world > 1:
            flag = self.acc.reduce(flag, "sum")
        if float(flag) > 0:
            stop = "interrupted"
        save_every = self.cfg.run.save_every
        if stop != "completed" or step == self.total_steps or (save_every and step % save_every == 0):
            self.save(step)
        return stop

    # ------------------------------------------------------------------ finish

    def finish(self, stop: str) -> TrainResult:
        """Final adapter (= best by validation accuracy), calibration and report; or the resume hint."""
        run_dir, step = self.run_dir, self.step
        speed = speed_summary(self.train_seconds, self.cpu_seconds, self.seen["examples"], self.seen["tokens"],
                              self.seen["supervised"], self.acc.device)
        result = TrainResult(run_dir, None, stop, step, self.best_step, self.best_acc)
        if stop == "interrupted":
            if self.main:
                print(f"interrupted at step {step}: checkpoint saved in {ck.find_latest(run_dir)}; continue with\n"
                      f"  medqa train --config {run_dir / 'config.yaml'} --out {run_dir} --resume")
            result.summary = {"stopped": stop, "step": step, **speed}
            return result
        with full_params(self.dist_type, self.wrapper):
            if self.main:
                result = finish_run(self, result, speed)
        self.acc.wait_for_everyone()
        return result
