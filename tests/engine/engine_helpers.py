"""Helpers shared by the engine tests (a uniquely named module: ``conftest`` names collide across test folders)."""
from __future__ import annotations

import json
import math


def logits_for(*probs: float) -> list[float]:
    """Logits whose softmax is exactly ``probs`` (handy for threshold tests)."""
    return [math.log(p) for p in probs]


class ScriptedTokens:
    """A LogitsProcessor that forces generation to emit ``ids`` one by one (then repeats the last).

    Counts its calls, so tests can check generation *stopped* rather than was merely cut afterwards.
    """

    def __init__(self, ids):
        self.ids, self.calls, self.prompt_len = list(ids), 0, None

    def __call__(self, input_ids, scores):
        if self.prompt_len is None:
            self.prompt_len = input_ids.shape[1]
        step = input_ids.shape[1] - self.prompt_len
        self.calls += 1
        forced = self.ids[min(step, len(self.ids) - 1)]
        scores = scores.clone()
        scores[:] = float("-inf")
        scores[:, forced] = 0.0
        return scores


def medmcqa_rows(n: int, with_answer: bool = True) -> list[dict]:
    """Synthetic MedMCQA-format rows (cop 1-based) with unique ids."""
    words = "heart lung kidney liver drug dose artery vein nerve muscle bone blood".split()
    rows = []
    for i in range(n):
        row = {"id": f"item-{i:03d}", "question": f"Which {words[i % 12]} finding is most likely in case {i}?",
               "opa": words[(i + 1) % 12], "opb": words[(i + 2) % 12], "opc": words[(i + 3) % 12],
               "opd": words[(i + 4) % 12], "subject_name": "Test", "exp": "", "choice_type": "single"}
        if with_answer:
            row["cop"] = 1 + i % 4
        rows.append(row)
    return rows


def write_jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)
