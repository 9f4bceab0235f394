"""Training data for the loop: train/validation items from --data/--task, never overlapping evaluation.

Kept apart from the loop because it is pure item bookkeeping (splits, de-duplication, limits) with no
torch in it; the tokenisation of these items is in tokenize.py.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ..records import MCQItem, MedQAError
from .config import TrainConfig


def _local_eval_items(task: str) -> list[MCQItem] | None:
    """The task's eval items if they are on local disk (never a Hub download just for de-duplication)."""
    from ..data import find_data_dir, get_task, load_items

    try:
        spec = get_task(task)
        root = find_data_dir()
    except MedQAError:
        return None
    if root is None or not (root / spec.eval_file).is_file():
        return None
    return load_items(root / spec.eval_file, spec.adapter, on_bad_row="skip").items


def load_training_items(cfg: TrainConfig) -> tuple[list[MCQItem], list[MCQItem], dict]:
    """(train, val, info) from --data/--task and --val-data/--val-fraction, de-duplicated against eval."""
    from ..data import dedup_against, get_task, load_items, resolve_task, train_val_split

    d = cfg.data
    info: dict[str, Any] = {}
    if d.train_file:
        if d.task:
            spec = get_task(d.task)
            if Path(d.train_file).name == Path(spec.eval_file).name and Path(d.train_file).parent.name == \
                    Path(spec.eval_file).parent.name:
                raise MedQAError(f"--data {d.train_file} is the {d.task} *evaluation* split; never train on it "
                                 "(use the task's train file, or --task without --data)")
        loaded = load_items(d.train_file, d.dataset or None, on_bad_row="skip")
    else:
        loaded = resolve_task(d.task, split="train", on_bad_row="skip")
    items = [it for it in loaded.items if it.answer is not None]
    info["train_source"] = loaded.source
    info["rows_skipped"] = len(loaded.skipped)
    if d.val_file:
        val = [it for it in load_items(d.val_file, d.dataset or None, on_bad_row="skip").items if it.answer is not None]
        train = items
        info["val_source"] = d.val_file
    else:
        train, val = train_val_split(items, d.val_fraction, seed=cfg.optim.seed)
        info["val_source"] = f"{d.val_fraction:.0%} of the training items (sha256 split, seed {cfg.optim.seed})"
    if d.dedup_eval and d.task:
        ev = _local_eval_items(d.task)
        if ev is not None:
            train, n_tr = dedup_against(train, ev, within=False)
            val, n_va = dedup_against(val, ev, within=False)
            info["dropped_overlapping_eval"] = n_tr + n_va
    if val:  # validation questions must not be trained on either
        train, n = dedup_against(train, val, within=False)
        info["dropped_overlapping_val"] = n
    if d.limit:
        train = train[: d.limit]
    if d.val_limit:
        val = val[: d.val_limit]
    if not train:
        raise MedQAError("no labelled training items left (check --data/--task, --limit and --val-fraction)")
    info["n_train"], info["n_val"] = len(train), len(val)
    return train, val, info


def resolve_items(cfg: TrainConfig, train_items: Sequence[MCQItem] | None,
                  val_items: Sequence[MCQItem] | None) -> tuple[list[MCQItem], list[MCQItem], dict]:
    """(train, val, info) for :func:`~medqa.training.loop.train`: the given items (benchmarks, tests), or
    :func:`load_training_items` when ``train_items`` is None (given ``val_items`` then replace its split)."""
    if train_items is None:
        train_items, val_loaded, data_info = load_training_items(cfg)
        val_items = val_loaded if val_items is None else list(val_items)
    else:
        train_items, val_items = list(train_items), list(val_items or [])
        data_info = {"train_source": "given", "n_train": len(train_items), "n_val": len(val_items)}
    return train_items, val_items, data_info
