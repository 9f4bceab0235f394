"""Run folders: files, resume without re-scoring, temperature/conformal, multi-run comparison, reports."""
from __future__ import annotations

import json
import math

import pytest

from medqa.evaluation import runner
from medqa.records import MCQItem, MedQAError
from medqa.scoring import DummyScorer
from medqa.utils.io import read_jsonl_complete


def _items(n=10):
    return [MCQItem(id=f"q{i}", question=f"question {i}?", options=["a", "b", "c", "d"][: 3 + i % 2],
                    answer=i % 3, subject=["cardio", "pharma"][i % 2]) for i in range(n)]


def _smart(item):
    """Right on even ids (gold letter gets logit 2), wrong on odd ones (a wrong letter gets 2)."""
    i = int(item.id[1:])
    z = [0.0] * len(item.options)
    z[item.answer if i % 2 == 0 else (item.answer + 1) % len(item.options)] = 2.0
    return z


class Recording(DummyScorer):
    """Remembers which ids it scored; optionally fails on the n-th call (a crash mid-run)."""

    def __init__(self, fn=_smart, fail_on_call=None):
        super().__init__(fn)
        self.seen, self.fail_on_call = [], fail_on_call

    def score(self, items, evidence=None):
        if self.fail_on_call is not None and self.calls + 1 == self.fail_on_call:
            raise RuntimeError("simulated crash")
        self.seen += [it.id for it in items]
        return super().score(items, evidence)


def test_evaluate_writes_the_run_folder(tmp_path):
    m = runner.evaluate(Recording(), _items(10), tmp_path / "run", task="t", chunk_size=4, progress=False)
    assert m["accuracy"] == pytest.approx(0.5) and m["n_items"] == 10
    for f in ("metrics.json", "predictions.jsonl", "report.md", "reliability.png", "subjects.png", "run.json"):
        assert (tmp_path / "run" / f).is_file(), f
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["accuracy"] == pytest.approx(0.5)
    preds = read_jsonl_complete(tmp_path / "run" / "predictions.jsonl")
    assert [p["id"] for p in preds] == [f"q{i}" for i in range(10)]  # item order, whatever the scoring order
    p0 = preds[0]
    assert sum(p0["probs"]) == pytest.approx(1.0, abs=1e-5) and p0["correct"] is True and p0["pred_letter"] == "A"
    assert "cardio" in (tmp_path / "run" / "report.md").read_text()
    with pytest.raises(MedQAError, match="--resume"):
        runner.evaluate(Recording(), _items(10), tmp_path / "run", progress=False)
    with pytest.raises(MedQAError, match="unique"):
        runner.evaluate(Recording(), _items(3) + _items(2), tmp_path / "dup", progress=False)


def test_resume_scores_only_missing_items_and_survives_a_torn_line(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError):
        runner.evaluate(Recording(fail_on_call=2), _items(10), out, chunk_size=4, progress=False)
    first = read_jsonl_complete(out / "predictions.jsonl")
    assert len(first) == 4
    with open(out / "predictions.jsonl", "a") as f:
        f.write('{"id": "q9", "torn')  # a crash in the middle of a write
    again = Recording()
    m = runner.evaluate(again, _items(10), out, resume=True, chunk_size=4, progress=False)
    assert sorted(again.seen) == sorted(set(f"q{i}" for i in range(10)) - {r["id"] for r in first})
    assert m["timing"]["resumed"] == 4 and m["timing"]["scored_now"] == 6
    assert len(read_jsonl_complete(out / "predictions.jsonl")) == 10
    assert m["accuracy"] == pytest.approx(0.5)
    # resuming with another scorer/style is refused
    other = Recording()
    other.name = "other"
    with pytest.raises(MedQAError, match="new --out"):
        runner.evaluate(other, _items(10), out, resume=True, progress=False)


def test_temperature_and_conformal_in_the_run(tmp_path):
    m1 = runner.evaluate(Recording(), _items(10), tmp_path / "a", progress=False, report=False)
    m2 = runner.evaluate(Recording(), _items(10), tmp_path / "b", temperature=2.0, progress=False,
                         conformal={"coverage": 0.9, "threshold": 0.8})
    assert m2["accuracy"] == m1["accuracy"]
    assert m2["uncalibrated"]["nll"] == pytest.approx(m1["nll"])
    assert m2["mean_confidence"] < m1["mean_confidence"]
    p = read_jsonl_complete(tmp_path / "b" / "predictions.jsonl")[0]
    e2 = math.exp(2.0 / 2.0)
    assert p["probs"][0] == pytest.approx(e2 / (e2 + 2), abs=1e-5)  # softmax([2,0,0] / T=2)
    assert p["conformal_set"] == [k for k, q in enumerate(p["probs"]) if q >= 0.2] and "conformal" in m2
    assert "Conformal" in (tmp_path / "b" / "report.md").read_text()


def test_calibrate_fits_on_validation_items(tmp_path):
    # over-confident dummy: logit 6 on a letter that is right 60% of the time
    items = [MCQItem(id=f"v{i}", question="q?", options=["a", "b", "c", "d"], answer=0 if i % 5 < 3 else 1)
             for i in range(100)]
    info = runner.calibrate(DummyScorer(lambda it: [6.0, 0, 0, 0]), items, tmp_path / "cal", coverage=0.9,
                            progress=False)
    assert info["temperature"] > 1.5 and info["nll_after"] < info["nll_before"]
    assert 0 < info["threshold"] <= 1 and (tmp_path / "cal" / "calibration.json").is_file()


def test_compare_runs_lists_flips(tmp_path):
    runner.evaluate(Recording(), _items(10), tmp_path / "a", progress=False, report=False)
    runner.evaluate(Recording(lambda it: [2.0 if k == it.answer else 0.0 for k in range(len(it.options))]),
                    _items(10), tmp_path / "b", progress=False, report=False)
    res = runner.compare_runs(tmp_path / "a", tmp_path / "b", out=tmp_path / "cmp", n_boot=500)
    c = next(iter(res["tasks"].values()))
    assert c["flipped_to_correct"] == ["q1", "q3", "q5", "q7", "q9"] and c["flipped_to_wrong"] == []
    assert c["accuracy_b"] == 1.0 and c["mcnemar"]["p_exact"] == pytest.approx(2 * 0.5 ** 5)
    assert "q3" in (tmp_path / "cmp" / "comparison.md").read_text()
    with pytest.raises(MedQAError, match="eval run folder"):
        runner.compare_runs(tmp_path / "a", tmp_path / "nothing")


def test_evaluate_tasks_writes_a_leaderboard_summary(tmp_path, shared_data, monkeypatch):
    monkeypatch.setenv("MEDQA_DATA_DIR", str(shared_data))
    res = runner.evaluate_tasks(DummyScorer(lambda it: [1.0] + [0.0] * (len(it.options) - 1)),
                                ["pubmedqa", "mmlu_medical"], tmp_path, limit=40, label="always-A", progress=False)
    assert set(res) == {"pubmedqa", "mmlu_medical"} and res["pubmedqa"]["n_items"] == 40
    summary = (tmp_path / "summary.md").read_text()
    assert "| always-A |" in summary and "PubMedQA" in summary and "MMLU anatomy" in summary
    assert res["pubmedqa"]["letters"]["pred_distribution"]["A"] == 1.0  # the letter-bias check sees it
    assert json.loads((tmp_path / "summary.json").read_text())["pubmedqa"]["n_items"] == 40
