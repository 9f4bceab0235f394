"""The scorer interface (cf. lm-eval's ``LM``): items in, one log-probability row per item out.

A row holds natural-log probabilities *normalised over that item's options* (length K = 2..5), so
``exp(row).sum() == 1``.  Evidence strings (RAG passages) are optional, one per item.
Temperature calibration is applied by callers via ``apply_temperature`` on these rows' logits.
"""
from __future__ import annotations

import math
from typing import Callable, Protocol, Sequence, runtime_checkable

from ..records import MCQItem


@runtime_checkable
class Scorer(Protocol):
    name: str

    def score(self, items: Sequence[MCQItem], evidence: Sequence[str | None] | None = None) -> list[list[float]]:
        """Return per-item log-probabilities over the item's options."""
        ...


def softmax_rows(logits: Sequence[float], temperature: float = 1.0) -> list[float]:
    """Log-softmax of one row of option logits at a temperature (log-probs are valid logits)."""
    scaled = [x / temperature for x in logits]
    m = max(scaled)
    lse = m + math.log(sum(math.exp(x - m) for x in scaled))
    return [x - lse for x in scaled]


class DummyScorer:
    """Deterministic scorer for tests: ``fn(item) -> logits`` (default: uniform)."""

    name = "dummy"

    def __init__(self, fn: Callable[[MCQItem], Sequence[float]] | None = None):
        self.fn = fn or (lambda item: [0.0] * len(item.options))
        self.calls = 0

    def score(self, items, evidence=None):
        self.calls += 1
        return [softmax_rows(list(self.fn(it))) for it in items]
