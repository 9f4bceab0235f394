"""Deterministic train/validation splits and question-level de-duplication between splits.

Splits hash ``seed:id`` with SHA-256 (never Python's ``hash()``, which is salted per process), so the same
items give the same split on every run and machine, independent of input order.
"""
from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Iterable, Sequence

from ..records import MCQItem, MedQAError

_PUNCT = re.compile(r"[^\w\s]|_")
_SPACE = re.compile(r"\s+")


def _rank(item_id: str, seed: int) -> bytes:
    return hashlib.sha256(f"{seed}:{item_id}".encode("utf-8")).digest()


def val_size(n: int, val_fraction: float) -> int:
    """How many of ``n`` items go to validation: rounded, at least 1 and leaving at least 1 for training."""
    if n < 2 or val_fraction == 0:
        return 0
    return min(max(1, int(n * val_fraction + 0.5)), n - 1)


def train_val_split(
    items: Sequence[MCQItem], val_fraction: float = 0.1, seed: int = 0
) -> tuple[list[MCQItem], list[MCQItem]]:
    """Split into (train, val); both keep the input order.  The val set is the ``val_fraction`` of items
    with the smallest ``sha256(seed:id)``: reproducible, and unaffected by the order of ``items``."""
    if not 0 <= val_fraction < 1:
        raise MedQAError(f"val_fraction must be in [0, 1), not {val_fraction}")
    k = val_size(len(items), val_fraction)
    order = sorted(range(len(items)), key=lambda i: (_rank(items[i].id, seed), i))
    val_idx = set(order[:k])
    train = [it for i, it in enumerate(items) if i not in val_idx]
    val = [it for i, it in enumerate(items) if i in val_idx]
    return train, val


def normalize_question(text: str) -> str:
    """Question text for duplicate matching: NFKC, lowercase, punctuation removed, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).lower()
    return _SPACE.sub(" ", _PUNCT.sub(" ", text)).strip()


def _question(x: MCQItem | str) -> str:
    return x if isinstance(x, str) else x.question


def dedup_against(
    items: Sequence[MCQItem], reference: Iterable[MCQItem | str], *, within: bool = True
) -> tuple[list[MCQItem], int]:
    """Drop items whose normalised question appears in ``reference`` (items or question strings) and,
    when ``within``, later repeats inside ``items``.  Returns (kept, n_dropped); callers report the count
    so train/eval leakage is visible."""
    banned = {normalize_question(_question(r)) for r in reference}
    kept: list[MCQItem] = []
    for item in items:
        key = normalize_question(item.question)
        if key in banned:
            continue
        kept.append(item)
        if within:
            banned.add(key)
    return kept, len(items) - len(kept)
