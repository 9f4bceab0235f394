"""Fixtures for the engine tests: a tiny saved model (fast) and helpers to steer or score deterministically."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> str:
    """A tiny random Llama + tokenizer folder, loadable with ``--model PATH``."""
    from medqa.testing import save_tiny

    return save_tiny(tmp_path_factory.mktemp("engine") / "tiny")


@pytest.fixture(scope="session")
def tiny_bundle(tiny_dir):
    from medqa.modeling import load_model

    return load_model(tiny_dir, device="cpu")


@pytest.fixture
def dummy_engine(tiny_bundle):
    """An engine with the tiny model for generation and a DummyScorer whose logits the test sets."""
    from medqa.engine import Engine
    from medqa.scoring import DummyScorer

    def make(fn=None, **kw):
        kw.setdefault("threads", 0)
        return Engine(tiny_bundle, DummyScorer(fn), **kw)

    return make


@pytest.fixture
def count_scored(monkeypatch):
    """Count items that reach the real HFScorer (to prove resumed runs skip finished ids)."""
    from medqa.scoring.hf import HFScorer

    seen: list[str] = []
    original = HFScorer.score

    def counting(self, items, evidence=None):
        seen.extend(it.id for it in items)
        return original(self, items, evidence)

    monkeypatch.setattr(HFScorer, "score", counting)
    return seen
