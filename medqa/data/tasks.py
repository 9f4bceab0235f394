"""The benchmark tasks by name, and where their eval/train data lives (local data dir first, else the Hub).

Local files are the public subsets described in ``shared/data/PROVENANCE.md``; the Hub entries are the
full public splits.  A task's local eval file is often only a sample, so results on it are not comparable
to published numbers; ``Loaded.source`` always says which one was used.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from ..records import DataError, MedQAError
from .io import Loaded, load_items, merge_loaded

log = logging.getLogger(__name__)

SPLITS = ("eval", "train")
MMLU_MEDICAL_SUBJECTS = (
    "anatomy",
    "clinical_knowledge",
    "college_biology",
    "college_medicine",
    "medical_genetics",
    "professional_medicine",
)


@dataclass(frozen=True)
class TaskSpec:
    """One benchmark: its adapter, local files (relative to the data dir) and Hub coordinates.

    ``hub_configs`` holds one entry per Hub config to concatenate (None = the default config).
    An empty ``train_files`` / a None ``hub_train_split`` means there is no train data for the task.
    """

    name: str
    adapter: str
    description: str
    eval_file: str
    train_files: tuple[str, ...]
    hub_id: str
    hub_configs: tuple[str | None, ...]
    hub_eval_split: str
    hub_train_split: str | None

    def local_files(self, split: str) -> tuple[str, ...]:
        return (self.eval_file,) if split == "eval" else self.train_files

    def hub_split(self, split: str) -> str | None:
        return self.hub_eval_split if split == "eval" else self.hub_train_split


TASKS: dict[str, TaskSpec] = {
    "medmcqa": TaskSpec(
        name="medmcqa",
        adapter="medmcqa",
        description="MedMCQA (Indian medical entrance exams), 4 options",
        eval_file="medmcqa/dev_public.jsonl",
        train_files=("medmcqa/train_cardio_subset.jsonl",),
        hub_id="openlifescienceai/medmcqa",
        hub_configs=(None,),
        hub_eval_split="validation",
        hub_train_split="train",
    ),
    "medqa": TaskSpec(
        name="medqa",
        adapter="medqa",
        description="MedQA-USMLE, 4 options",
        eval_file="medqa/test_sample.jsonl",
        train_files=(),
        hub_id="GBaker/MedQA-USMLE-4-options-hf",
        hub_configs=(None,),
        hub_eval_split="test",
        hub_train_split="train",
    ),
    "pubmedqa": TaskSpec(
        name="pubmedqa",
        adapter="pubmedqa",
        description="PubMedQA PQA-L, yes/no/maybe from an abstract",
        eval_file="pubmedqa/trainval.jsonl",
        train_files=(),
        hub_id="qiaojin/PubMedQA",
        hub_configs=("pqa_labeled",),
        hub_eval_split="train",
        hub_train_split=None,  # the labeled set *is* the eval set; make a split with train_val_split
    ),
    "mmlu_medical": TaskSpec(
        name="mmlu_medical",
        adapter="mmlu",
        description="MMLU medical subjects (6), 4 options",
        eval_file="mmlu/test_sample.jsonl",
        train_files=("mmlu/dev.jsonl", "mmlu/val.jsonl"),
        hub_id="cais/mmlu",
        hub_configs=MMLU_MEDICAL_SUBJECTS,
        hub_eval_split="test",
        hub_train_split="dev+validation",
    ),
}


def get_task(name: str) -> TaskSpec:
    """The task called ``name``; unknown names list the choices."""
    try:
        return TASKS[name]
    except KeyError:
        raise MedQAError(f"unknown task {name!r}; choose one of {', '.join(TASKS)}") from None


def _repo_root() -> Path:
    """The directory holding the ``medqa`` package (the repo root in a source checkout)."""
    return Path(__file__).resolve().parents[2]


def find_data_dir() -> Path | None:
    """The benchmark data folder: ``$MEDQA_DATA_DIR``, else ``shared/data`` or ``../shared/data``
    relative to the current directory or the repo root.  None when there is none (use the Hub).

    A set but non-existent ``$MEDQA_DATA_DIR`` is an error rather than a silent fall-back to the Hub.
    """
    env = os.environ.get("MEDQA_DATA_DIR")
    if env:
        path = Path(env).expanduser()
        if not path.is_dir():
            raise MedQAError(f"MEDQA_DATA_DIR={env} is not a directory; fix it or unset it to use the Hub")
        return path
    for base in (Path.cwd(), _repo_root()):
        for rel in ("shared/data", "../shared/data"):
            candidate = base / rel
            if candidate.is_dir():
                return candidate.resolve()
    return None


def _check_split(split: str) -> None:
    if split not in SPLITS:
        raise MedQAError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")


def resolve_task(
    name: str,
    split: str = "eval",
    data_dir: str | Path | None = None,
    *,
    on_bad_row: str = "error",
    limit: int | None = None,
) -> Loaded:
    """Load a task's eval or train items: local files when the data dir has them, else the Hub.

    An explicit ``data_dir`` that lacks the task's local file is an error (the user pointed somewhere
    specific); an auto-found one falls back to the Hub with a note.
    """
    spec = get_task(name)
    _check_split(split)
    explicit = data_dir is not None
    root = Path(data_dir).expanduser() if explicit else find_data_dir()
    files = spec.local_files(split)
    if root is not None and files:
        paths = [root / f for f in files]
        missing = [str(p) for p in paths if not p.exists()]
        if not missing:
            parts = [load_items(p, spec.adapter, on_bad_row=on_bad_row, limit=limit) for p in paths]
            return _finish(merge_loaded(parts), limit)
        if explicit:
            raise MedQAError(f"task {name!r} ({split}): missing {', '.join(missing)} in the data dir {root}")
        log.info("task %s (%s): %s not found, using the Hub", name, split, ", ".join(missing))
    hub_split = spec.hub_split(split)
    if hub_split is None:
        raise MedQAError(
            f"task {name!r} has no separate {split} split (its labeled set is the eval set); "
            f"carve one out with medqa.data.train_val_split"
        )
    try:
        return _finish(_from_hub(spec, hub_split, on_bad_row=on_bad_row, limit=limit), limit)
    except DataError:
        raise  # a bad row already says where it is
    except MedQAError as e:
        where = f"the data dir {root} has no local {split} file" if root else "no local data dir was found"
        raise MedQAError(f"task {name!r} ({split}): {where}, so it is read from the Hub: {e}") from e


def _from_hub(spec: TaskSpec, hub_split: str, *, on_bad_row: str, limit: int | None) -> Loaded:
    """Load every configured Hub config for the split and concatenate them."""
    parts = [
        load_items(spec.hub_id, spec.adapter, hub_split, config=cfg, on_bad_row=on_bad_row, limit=limit)
        for cfg in spec.hub_configs
    ]
    return merge_loaded(parts)


def _finish(loaded: Loaded, limit: int | None) -> Loaded:
    """Apply ``limit`` to the merged result (each part was limited separately)."""
    if limit is not None and len(loaded.items) > limit:
        loaded.items = loaded.items[:limit]
    return loaded
