"""The data layer: every benchmark file or Hub split becomes a list of :class:`medqa.records.MCQItem`.

Importing this package is cheap (no pandas/pyarrow/datasets until a file or Hub id needs them).
"""
from __future__ import annotations

from .adapters import ADAPTERS, AdapterContext, detect_dataset
from .inspect import format_report, inspect_items
from .io import SUPPORTED_FORMATS, Loaded, load_items, merge_loaded
from .split import dedup_against, normalize_question, train_val_split
from .tasks import TASKS, TaskSpec, find_data_dir, get_task, resolve_task

__all__ = [
    "ADAPTERS",
    "AdapterContext",
    "Loaded",
    "SUPPORTED_FORMATS",
    "TASKS",
    "TaskSpec",
    "dedup_against",
    "detect_dataset",
    "find_data_dir",
    "format_report",
    "get_task",
    "inspect_items",
    "load_items",
    "merge_loaded",
    "normalize_question",
    "resolve_task",
    "train_val_split",
]
