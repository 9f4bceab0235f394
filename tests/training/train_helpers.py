"""Fixtures for the training tests: tiny random models (~100k parameters) and tiny MCQ data."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

WORDS = ("heart lung kidney liver drug dose artery vein nerve muscle bone blood cell acid enzyme insulin glucose "
         "fever pain infection").split()


def tiny_items(n: int = 8, explanation: bool = True, seed: int = 0):
    from medqa.records import MCQItem

    items = []
    for i in range(n):
        w = lambda k: WORDS[(i * 7 + k * 3 + seed) % len(WORDS)]  # noqa: E731
        items.append(MCQItem(
            id=f"t{i}", question=f"which {w(0)} {w(1)} is the most likely cause of {w(2)} pain?",
            options=[f"{w(3)} {w(4)}", f"{w(5)} {w(6)}", f"{w(7)} {w(8)}", f"{w(9)} {w(10)}"], answer=i % 4,
            explanation=(f"the {w(11)} is a {w(12)}. {w(13)} blood flows to the {w(14)}. the {w(15)} acid is "
                         f"made by the {w(16)} cell.") if explanation else ""))
    return items


def write_jsonl(path: Path, items) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps({"id": it.id, "question": it.question, "options": it.options, "answer": it.answer,
                                "explanation": it.explanation}) + "\n")
    return path


def tiny_bundle(seed: int = 0, arch: str = "llama"):
    from medqa.device import detect_device
    from medqa.modeling import ModelBundle, prepare_tokenizer
    from medqa.testing import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    prepare_tokenizer(tok)
    model = tiny_model(tok, arch=arch, seed=seed)
    import torch

    return ModelBundle(model, tok, detect_device("cpu"), torch.float32, "tiny", "tiny")


def tiny_config(out: Path, **sections):
    """The default preset, shrunk for tiny models; ``sections`` = {"optim": {...}, ...} overrides."""
    from medqa.training.config import merge, preset_config

    base = {"model": {"device": "cpu", "threads": 1}, "lora": {"r": 8, "alpha": 16.0, "dropout": 0.0},
            "data": {"task": "", "train_file": "unused.jsonl", "max_length": 96, "dedup_eval": False},
            "optim": {"batch_size": 4, "grad_accum": 1, "lr": 5e-3, "max_steps": 6, "warmup_ratio": 0.0},
            "eval": {"every": -1, "calibrate": False}, "run": {"out": str(out), "progress": False, "save_every": 0}}
    for sec, kv in sections.items():
        base.setdefault(sec, {}).update(kv)
    return merge(preset_config("default"), base)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from medqa.testing import save_tiny

    path = tmp_path_factory.mktemp("tiny-llama")
    save_tiny(path, arch="llama", seed=0)
    return path
