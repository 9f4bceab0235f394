"""``medqa eval`` end to end on a tiny saved model: run folder, calibration saved next to the adapter and
re-used, resume, comparison."""
from __future__ import annotations

import json
import random

import pytest

from medqa.cli import main
from medqa.testing import save_tiny
from medqa.utils.io import read_jsonl_complete


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def data_file(tmp_path_factory):
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("data") / "mcq.jsonl"
    words = "heart lung kidney liver drug dose artery vein nerve muscle".split()
    with open(path, "w") as f:
        for i in range(80):
            row = {"id": f"m{i}", "question": " ".join(rng.choices(words, k=4 + i % 9)) + "?",
                   "subject_name": ["Anatomy", "Pharmacology"][i % 2], "cop": 1 + i % 4,
                   **{k: " ".join(rng.choices(words, k=2)) for k in ("opa", "opb", "opc", "opd")}}
            f.write(json.dumps(row) + "\n")
    return str(path)


def _adapter(tiny_dir, out):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False)).save_pretrained(out)
    return str(out)


def test_eval_calibrate_resume_and_compare(tiny_dir, data_file, tmp_path, capsys):
    base = ["eval", "--model", tiny_dir, "--data", data_file, "--dataset", "medmcqa", "--device", "cpu",
            "--no-progress", "--batch-size", "4"]
    run_a = tmp_path / "a"
    assert main(base + ["--out", str(run_a), "--calibrate-on", "auto", "--conformal", "0.8"]) == 0
    m = json.loads((run_a / "metrics.json").read_text())
    assert m["n_items"] == 56 and 0 <= m["accuracy"] <= 1  # 80 items, 30% held out for calibration
    assert m["temperature"] > 0 and m["uncalibrated"]["ece"] >= 0 and "empirical_coverage" in m["conformal"]
    assert (run_a / "calibration" / "calibration.json").is_file() and (run_a / "reliability.png").is_file()
    assert len(read_jsonl_complete(run_a / "predictions.jsonl")) == 56
    out = capsys.readouterr().out
    assert "temperature" in out and f"run folder: {run_a}" in out and "| model | Average |" in out

    # resume of a finished run re-scores nothing
    assert main(base + ["--out", str(run_a), "--resume", "--calibrate-on", "auto", "--conformal", "0.8"]) == 0
    assert json.loads((run_a / "metrics.json").read_text())["timing"]["scored_now"] == 0

    # with an adapter: calibration.json is written next to it, then picked up automatically
    adapter = _adapter(tiny_dir, tmp_path / "adapter")
    run_b = tmp_path / "b"
    assert main(base + ["--adapter", adapter, "--out", str(tmp_path / "b0"), "--calibrate-on", "auto"]) == 0
    saved = json.loads((tmp_path / "adapter" / "calibration.json").read_text())
    assert saved["style"] == "medqa" and saved["temperature"] > 0
    capsys.readouterr()
    assert main(base + ["--adapter", adapter, "--out", str(run_b)]) == 0
    assert "using calibration from" in capsys.readouterr().out
    assert json.loads((run_b / "metrics.json").read_text())["temperature"] == pytest.approx(saved["per_task"]["medmcqa"])

    # paired comparison of two runs over their common items
    assert main(["eval", "--compare", str(run_a), str(run_b), "--out", str(tmp_path / "cmp")]) == 0
    comp = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    task = next(iter(comp["tasks"].values()))
    assert task["n"] == 56 and task["only_in_one_run"] == 24  # run B scored all 80
    assert "McNemar" in capsys.readouterr().out


def test_eval_errors_are_actionable(tiny_dir, data_file, tmp_path, capsys):
    assert main(["eval", "--model", tiny_dir, "--data", data_file, "--resume"]) == 2
    assert "--resume needs --out" in capsys.readouterr().err
    assert main(["eval", "--model", tiny_dir, "--data", data_file, "--conformal", "0.9", "--out", str(tmp_path)]) == 2
    assert "--calibrate-on" in capsys.readouterr().err


def test_eval_rag_grounds_scores_and_refuses_a_leaking_index(tiny_dir, data_file, tmp_path, capsys):
    from medqa.rag import build_index

    items = [json.loads(line) for line in open(data_file)][:12]
    clean = tmp_path / "clean.jsonl"
    clean.write_text("".join(json.dumps({"id": f"d{i}", "text": f"note {i}: the artery supplies the muscle"}) + "\n"
                             for i in range(5)))
    leaky = tmp_path / "leaky.jsonl"
    leaky.write_text("".join(json.dumps({"id": r["id"], "text": r["question"]}) + "\n" for r in items))
    small = tmp_path / "small.jsonl"
    small.write_text("".join(json.dumps(r) + "\n" for r in items))
    for name, src in (("clean", clean), ("leaky", leaky)):
        build_index([str(src)], tmp_path / name, embed_model="hashing:256")
    base = ["eval", "--model", tiny_dir, "--data", str(small), "--no-progress"]

    assert main([*base, "--out", str(tmp_path / "plain")]) == 0
    assert main([*base, "--rag", str(tmp_path / "clean"), "--rag-k", "2", "--out", str(tmp_path / "rag")]) == 0
    plain = {r["id"]: r for r in read_jsonl_complete(tmp_path / "plain" / "predictions.jsonl")}
    grounded = {r["id"]: r for r in read_jsonl_complete(tmp_path / "rag" / "predictions.jsonl")}
    assert plain.keys() == grounded.keys()
    # the evidence block changes the prompt, so the scores move
    assert any(plain[i]["probs"] != grounded[i]["probs"] for i in plain)

    capsys.readouterr()
    assert main([*base, "--rag", str(tmp_path / "leaky"), "--out", str(tmp_path / "leak")]) == 2
    assert "contains" in capsys.readouterr().err
    assert main([*base, "--rag", str(tmp_path / "leaky"), "--allow-leakage", "--out", str(tmp_path / "leak2")]) == 0
