"""The retrieval interface shared by the local index and remote vector stores.

Kept free of heavy imports: callers type-check against :class:`Retriever` without loading FAISS or torch.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable

from ..prompts import format_evidence
from ..records import MCQItem

MODES = ("hybrid", "dense", "bm25")
_YES_NO = {"yes", "no", "maybe"}


@dataclass(frozen=True)
class Passage:
    """One retrieved chunk.

    ``id`` is the stable chunk id (``<doc id>#<chunk number>``) that explanations cite; ``score`` is the
    retriever's score in the mode used (fused RRF score for hybrid, cosine for dense, BM25 for bm25),
    comparable only within one result list; ``source`` names where the chunk came from (file or dataset).
    """

    id: str
    text: str
    score: float
    source: str


@runtime_checkable
class Retriever(Protocol):
    """Anything with ``search(query, k) -> list[Passage]`` (best first, at most ``k``)."""

    def search(self, query: str, k: int = 5) -> list[Passage]:
        ...


def check_mode(mode: str) -> str:
    from ..records import MedQAError

    if mode not in MODES:
        raise MedQAError(f"unknown retrieval mode {mode!r}; choose one of {', '.join(MODES)} (--mode)")
    return mode


def check_k(k: int) -> int:
    from ..records import MedQAError

    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise MedQAError(f"k must be a positive integer, not {k!r} (-k / --rag-k)")
    return k


def query_for_item(item: MCQItem) -> str:
    """The retrieval query for an MCQ: the question plus its options (yes/no/maybe options add nothing)."""
    opts = [o.strip() for o in item.options]
    if all(o.lower() in _YES_NO for o in opts):
        return item.question.strip()
    return item.question.strip() + "\n" + "\n".join(opts)


def evidence_block(passages: Sequence[Passage]) -> str:
    """Passages as the prompt's evidence block (``[id] text`` lines, see :func:`medqa.prompts.format_evidence`)."""
    return format_evidence([(p.id, p.text) for p in passages])
