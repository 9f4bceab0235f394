"""Atomic training checkpoints: a crash or ``kill -9`` at any moment leaves the previous one intact.

Layout of ``<run>/checkpoints/step-000120/`` (written into a temporary sibling, then renamed)::

    adapter_config.json, adapter_model.safetensors   a plain PEFT adapter (loadable on its own)
    optimizer.pt, scheduler.pt [, scaler.pt]         optimizer/schedule/loss-scaler state
    rng.pt                                           python/numpy/torch(/cuda) RNG state of every process
    trainer_state.json                               step, data position, best metric, early-stopping count

``checkpoints/latest.json`` names the newest complete checkpoint; it is written after the rename, and
:func:`find_latest` falls back to scanning for the highest complete ``step-*`` folder if it is stale.
"""
from __future__ import annotations

import json
import random
import re
import shutil
from pathlib import Path
from typing import Any

from ..records import MedQAError
from ..utils.io import atomic_dir, atomic_write_json

CKPT_ROOT = "checkpoints"
LATEST = "latest.json"
STATE_FILE = "trainer_state.json"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def step_dir(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / CKPT_ROOT / f"step-{step:06d}"


def rng_state() -> dict:
    import numpy as np
    import torch

    st = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def set_rng_state(st: dict) -> None:
    import numpy as np
    import torch

    random.setstate(st["python"])
    np.random.set_state(st["numpy"])
    torch.set_rng_state(st["torch"])
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


def save_adapter(peft_model, path: Path, state_dict: dict | None = None) -> None:
    """``save_pretrained`` into ``path`` (a folder that will be renamed into place by the caller)."""
    peft_model.save_pretrained(str(path), state_dict=state_dict, safe_serialization=True)


def save_checkpoint(run_dir: Path, step: int, *, peft_model, optimizer_state, scheduler, scaler, rng_states: list[dict],
                    trainer_state: dict, keep: int = 2, adapter_state: dict | None = None) -> Path:
    """Write ``step-<step>`` atomically, point ``latest.json`` at it and prune old step checkpoints.

    ``optimizer_state`` is a state dict, or ``{"per_rank": [...]}`` when each process holds a shard
    (FSDP/DeepSpeed); ``adapter_state`` a gathered full LoRA state dict in that case.
    """
    import torch

    final = step_dir(run_dir, step)
    with atomic_dir(final) as tmp:
        save_adapter(peft_model, tmp, adapter_state)
        torch.save(optimizer_state, tmp / "optimizer.pt")
        torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
        if scaler is not None:
            torch.save(scaler.state_dict(), tmp / "scaler.pt")
        torch.save(rng_states, tmp / "rng.pt")
        (tmp / STATE_FILE).write_text(json.dumps(trainer_state, indent=2, default=str) + "\n", encoding="utf-8")
    atomic_write_json(Path(run_dir) / CKPT_ROOT / LATEST, {"step": step, "dir": final.name})
    prune(run_dir, keep)
    return final


def complete_checkpoints(run_dir: Path) -> list[tuple[int, Path]]:
    root = Path(run_dir) / CKPT_ROOT
    out = []
    if root.is_dir():
        for p in root.iterdir():
            m = _STEP_DIR.match(p.name)
            if m and p.is_dir() and (p / STATE_FILE).is_file() and (p / "adapter_model.safetensors").is_file():
                out.append((int(m.group(1)), p))
    return sorted(out)


def find_latest(run_dir: Path) -> Path | None:
    """The newest complete checkpoint of a run folder, or None."""
    root = Path(run_dir) / CKPT_ROOT
    try:
        latest = json.loads((root / LATEST).read_text(encoding="utf-8"))
        cand = root / latest["dir"]
        if (cand / STATE_FILE).is_file() and (cand / "adapter_model.safetensors").is_file():
            return cand
    except (OSError, ValueError, KeyError, TypeError):
        pass
    done = complete_checkpoints(run_dir)
    return done[-1][1] if done else None


def prune(run_dir: Path, keep: int) -> None:
    for _step, p in complete_checkpoints(run_dir)[:-keep]:
        shutil.rmtree(p, ignore_errors=True)


def load_checkpoint(ckpt: Path, *, peft_model, optimizer, scheduler, scaler, rank: int = 0) -> dict:
    """Restore adapter weights, optimizer, scheduler, scaler and this process's RNG; return trainer_state."""
    import torch
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    try:
        weights = load_file(str(ckpt / "adapter_model.safetensors"))
        result = set_peft_model_state_dict(peft_model, weights)
        unexpected = [k for k in getattr(result, "unexpected_keys", []) or [] if "lora_" in k]
        if unexpected:
            raise MedQAError(f"checkpoint {ckpt} does not match this LoRA setup (unexpected {unexpected[:3]}); "
                             "resume with the run's own config.yaml")
        opt = torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=False)
        if isinstance(opt, dict) and "per_rank" in opt:
            if rank >= len(opt["per_rank"]):
                raise MedQAError(f"checkpoint {ckpt} was written by {len(opt['per_rank'])} processes; resume a sharded "
                                 "(FSDP/DeepSpeed) run with the same number of processes")
            opt = opt["per_rank"][rank]
        optimizer.load_state_dict(opt)
        scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", map_location="cpu", weights_only=False))
        if scaler is not None and (ckpt / "scaler.pt").is_file():
            scaler.load_state_dict(torch.load(ckpt / "scaler.pt", map_location="cpu", weights_only=False))
        rngs = torch.load(ckpt / "rng.pt", map_location="cpu", weights_only=False)
        set_rng_state(rngs[rank] if rank < len(rngs) else rngs[0])
        return json.loads((ckpt / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise MedQAError(f"could not resume from {ckpt}: {e}; delete that folder to fall back to an older "
                         "checkpoint") from e


def trainer_state(step: int, epoch: int, batch_in_epoch: int, **extra: Any) -> dict:
    return {"step": step, "epoch": epoch, "batch_in_epoch": batch_in_epoch, **extra}
