"""Retrieval-augmented answering: corpus → chunks → hybrid (dense + BM25) index → passages with ids.

The stable API (everything else is internal)::

    from medqa.rag import load_retriever, evidence_block
    retriever = load_retriever("runs/index")            # or "qdrant://host:6333/medqa"
    passages = retriever.search("first-line drug for stable angina", k=5)   # list[Passage], best first
    render_prompt(item, evidence=evidence_block(passages))                    # "[id] text" lines

``Passage`` is frozen: ``id`` (``<doc id>#<n>``, what explanations cite), ``text``, ``score``, ``source``.
Importing this package is cheap; FAISS, bm25s, torch and qdrant-client load on first use.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .base import MODES, Passage, Retriever, evidence_block, query_for_item
from .leakage import LeakageMatch, LeakageReport, check_leakage, own_context_docs

if TYPE_CHECKING:  # pragma: no cover
    from .store import AddStats, LocalIndex

__all__ = [
    "MODES", "Passage", "Retriever", "evidence_block", "query_for_item", "load_retriever", "build_index",
    "add_to_index", "LeakageMatch", "LeakageReport", "check_leakage",
    "own_context_docs",
]


def load_retriever(path_or_url: str | Path, *, mode: str = "hybrid", embed_model: str | None = None,
                   device: str | None = None):
    """A :class:`Retriever` for a local index folder or a vector-store URL (``qdrant://``, ``qdrants://``,
    ``qdrant+local:``).  ``mode`` is the default for ``search``: hybrid, dense or bm25.  ``embed_model``
    overrides the manifest's query model (it must produce the same vectors, or it is refused)."""
    text = str(path_or_url)
    scheme = text.split(":", 1)[0].lower() if ":" in text and not Path(text).exists() else ""
    if scheme in ("qdrant", "qdrants", "qdrant+local"):
        from .remote import QdrantRetriever

        return QdrantRetriever.from_url(text, mode=mode, embed_model=embed_model, device=device)
    if "://" in text and not Path(text).exists():
        from ..records import MedQAError

        raise MedQAError(
            f"--rag {text}: unsupported retriever address; give a local index folder or qdrant://HOST:PORT/COLLECTION "
            "(other stores: implement medqa.rag.Retriever, see docs/rag.md)"
        )
    from .store import LocalIndex

    return LocalIndex.load(text, embed_model=embed_model, device=device, mode=mode)


def build_index(sources, out, **kwargs) -> "tuple[LocalIndex, AddStats]":
    """Build a local index folder from corpus sources; see :func:`medqa.rag.store.build_index`."""
    from .store import build_index as _build

    return _build(sources, out, **kwargs)


def add_to_index(path, sources, **kwargs) -> "tuple[LocalIndex, AddStats]":
    """Add/update documents in an existing local index; see :func:`medqa.rag.store.add_to_index`."""
    from .store import add_to_index as _add

    return _add(path, sources, **kwargs)
