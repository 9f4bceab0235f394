"""Reciprocal rank fusion (Cormack, Clarke & Buettcher, SIGIR 2009).

``score(d) = sum_i w_i / (k + rank_i(d))`` with 1-based ranks; a document absent from a ranking adds 0.
RRF needs no score calibration between BM25 (unbounded) and cosine (-1..1), which is why it is the
default fusion here: a passage ranked well by *both* retrievers beats one ranked first by only one.
"""
from __future__ import annotations

from typing import Hashable, Sequence, TypeVar

from ..records import MedQAError

K = TypeVar("K", bound=Hashable)
RRF_K = 60


def rrf(rankings: Sequence[Sequence[K]], k: int = RRF_K, weights: Sequence[float] | None = None) -> list[tuple[K, float]]:
    """Fuse best-first rankings into one best-first list of ``(key, score)``.

    Ties break by the best single rank a key reached, then by first appearance (ranking order, then
    position), so the result is deterministic.
    """
    if k < 0:
        raise MedQAError(f"RRF k must be >= 0, not {k}")
    weights = [1.0] * len(rankings) if weights is None else list(weights)
    if len(weights) != len(rankings):
        raise MedQAError(f"{len(weights)} RRF weights for {len(rankings)} rankings")
    score: dict[K, float] = {}
    best: dict[K, int] = {}
    first: dict[K, int] = {}
    for ranking, w in zip(rankings, weights):
        for rank, key in enumerate(ranking, start=1):
            score[key] = score.get(key, 0.0) + w / (k + rank)
            best[key] = min(best.get(key, rank), rank)
            first.setdefault(key, len(first))
    return sorted(score.items(), key=lambda kv: (-kv[1], best[kv[0]], first[kv[0]]))
