"""Grounded scoring for evaluation: retrieve top-k passages per item, then score with them as evidence.

It wraps any :class:`~medqa.scoring.base.Scorer`, so ``medqa eval --rag INDEX`` measures exactly what
``ask --rag`` answers with (same query, same evidence block).
"""
from __future__ import annotations

from typing import Sequence

from ..records import MCQItem
from .base import evidence_block, query_for_item


class RetrievalScorer:
    def __init__(self, inner, retriever, k: int = 3):
        self.inner, self.retriever, self.k = inner, retriever, k
        self.name = f"{inner.name}+rag{k}"

    def score(self, items: Sequence[MCQItem], evidence: Sequence[str | None] | None = None) -> list[list[float]]:
        retrieved = [evidence_block(self.retriever.search(query_for_item(it), self.k)) for it in items]
        if evidence is not None:  # caller-supplied evidence comes first
            retrieved = ["\n\n".join(x for x in (e, r) if x) for e, r in zip(evidence, retrieved)]
        return self.inner.score(items, evidence=retrieved)
