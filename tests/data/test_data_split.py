"""Deterministic train/val splits and question de-duplication."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from medqa.data import dedup_against, train_val_split
from medqa.data.split import normalize_question
from medqa.records import MCQItem, MedQAError


def make(n: int) -> list[MCQItem]:
    return [MCQItem(f"id{i}", f"Question {i}?", ["a", "b"], i % 2) for i in range(n)]


def test_split_sizes_partition_and_order():
    items = make(100)
    train, val = train_val_split(items, 0.1, seed=0)
    assert (len(train), len(val)) == (90, 10)
    assert {it.id for it in train} | {it.id for it in val} == {it.id for it in items}
    assert not {it.id for it in train} & {it.id for it in val}
    assert [it.id for it in train] == [it.id for it in items if it in train]  # input order kept


def test_split_independent_of_input_order_and_seed_sensitive():
    items = make(200)
    _, val = train_val_split(items, 0.2, seed=3)
    _, val_rev = train_val_split(items[::-1], 0.2, seed=3)
    _, val_other = train_val_split(items, 0.2, seed=4)
    assert {it.id for it in val} == {it.id for it in val_rev}
    assert {it.id for it in val} != {it.id for it in val_other}


def test_split_same_in_another_process_with_other_hash_seed(repo_root):
    code = ("from medqa.data.split import train_val_split\nfrom medqa.records import MCQItem\n"
            "items=[MCQItem(f'id{i}', f'Q{i}?', ['a','b'], 0) for i in range(50)]\n"
            "print(','.join(it.id for it in train_val_split(items, 0.2, seed=7)[1]))")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], cwd=repo_root, env=env, capture_output=True, text=True,
                         check=True)
    items = [MCQItem(f"id{i}", f"Q{i}?", ["a", "b"], 0) for i in range(50)]
    here = ",".join(it.id for it in train_val_split(items, 0.2, seed=7)[1])
    assert out.stdout.strip() == here and len(here.split(",")) == 10


def test_split_edge_cases():
    assert len(train_val_split(make(5), 0.1)[1]) == 1  # rounds up to at least one val item
    assert train_val_split(make(1), 0.5) == (make(1), [])
    assert train_val_split(make(4), 0.0)[1] == []
    with pytest.raises(MedQAError):
        train_val_split(make(4), 1.0)


def test_normalize_question():
    assert normalize_question("  What's   the DRUG-of choice?\n") == "what s the drug of choice"
    assert normalize_question("What’s the drug of choice") == normalize_question("what's the drug, of choice?")


def test_dedup_against_reference_and_within():
    items = [MCQItem("1", "Drug of choice for X?", ["a", "b"], 0),
             MCQItem("2", "drug  of choice for x", ["c", "d"], 1),
             MCQItem("3", "Unique question", ["a", "b"], 0),
             MCQItem("4", "Seen in eval!", ["a", "b"], 0)]
    reference = [MCQItem("e", "seen in EVAL", ["x", "y"], 0)]
    kept, dropped = dedup_against(items, reference)
    assert [it.id for it in kept] == ["1", "3"] and dropped == 2
    kept, dropped = dedup_against(items, ["Unique question."], within=False)
    assert [it.id for it in kept] == ["1", "2", "4"] and dropped == 1
