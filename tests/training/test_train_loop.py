"""The training loop on tiny models: EOS is learned, resume after a crash, the NaN guard, Ctrl-C, outputs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from train_helpers import tiny_bundle, tiny_config, tiny_items, write_jsonl

from medqa.prompts import encode, render_prompt, render_target
from medqa.training.loop import TrainingDiverged, train

REPO = Path(__file__).resolve().parents[2]


def _generate(bundle, item, max_new_tokens=60):
    tok = bundle.tokenizer
    ids = torch.tensor([encode(tok, render_prompt(item))])
    bundle.model.eval()
    with torch.no_grad():
        out = bundle.model.generate(ids, max_new_tokens=max_new_tokens, do_sample=False,
                                    eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return out[0, ids.shape[1]:].tolist()


def test_eos_is_learned_tiny_model_overfits_and_stops(tmp_path):
    items = tiny_items(4)
    bundle = tiny_bundle()
    before = _generate(bundle, items[0])
    assert before[-1] != bundle.tokenizer.eos_token_id  # a random model does not stop by itself
    cfg = tiny_config(tmp_path / "run", lora={"r": 16, "alpha": 32.0},
                      data={"with_explanation": True, "letter_weight": 1.0, "explanation_weight": 1.0},
                      optim={"max_steps": 100, "lr": 1e-2, "batch_size": 4})
    res = train(cfg, train_items=items, val_items=[], bundle=bundle)
    assert res.stopped == "completed" and res.steps == 100
    tok = bundle.tokenizer
    for item in items:
        out = _generate(bundle, item)
        assert out[-1] == tok.eos_token_id, "generation did not stop with EOS"
        assert tok.decode(out[:-1]) == render_target(item)  # exactly answer + explanation, then stop
    assert (res.adapter_dir / "adapter_model.safetensors").is_file() and (res.run_dir / "loss_curve.png").is_file()
    card = (res.adapter_dir / "README.md").read_text()
    assert "library_name: peft" in card and "LoRA" in card


def _cli(args, env_extra=None, check=True):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", **(env_extra or {})}
    proc = subprocess.run([sys.executable, "-m", "medqa", "train", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return proc


def _common(model_dir, data):
    return ["--model", str(model_dir), "--data", str(data), "--dataset", "generic", "--task", "", "--device", "cpu",
            "--threads", "1", "--val-fraction", "0", "--max-steps", "8", "--batch-size", "4", "--grad-accum", "1",
            "--lora-r", "8", "--lora-dropout", "0.1", "--lr", "5e-3", "--eval-every", "-1", "--no-calibrate",
            "--no-progress", "--save-every", "2", "--max-length", "96", "--no-dedup-eval"]


def _adapter(run: Path, step: int):
    from safetensors.torch import load_file

    return load_file(str(run / "checkpoints" / f"step-{step:06d}" / "adapter_model.safetensors"))


def _train_in_process(args):
    """The `medqa train` code path without a subprocess (argument parsing → config → loop)."""
    from medqa.cli import build_parser
    from medqa.training.config import from_args

    return train(from_args(build_parser().parse_args(["train", *args])))


def test_resume_after_kill_continues_at_the_right_step(tmp_path, tiny_model_dir):
    from medqa.records import MedQAError

    data = write_jsonl(tmp_path / "train.jsonl", tiny_items(12))
    ref, run = tmp_path / "ref", tmp_path / "crashy"
    _train_in_process(_common(tiny_model_dir, data) + ["--out", str(ref)])
    crashed = _cli(_common(tiny_model_dir, data) + ["--out", str(run)], {"MEDQA_FAULT": "crash@5"}, check=False)
    assert crashed.returncode == 137  # died like kill -9, right after step 5 (last checkpoint: step 4)
    assert json.loads((run / "checkpoints" / "latest.json").read_text())["step"] == 4
    assert not (run / "adapter").exists()
    with pytest.raises(MedQAError, match="--resume"):  # refuses to overwrite an existing run
        _train_in_process(_common(tiny_model_dir, data) + ["--out", str(run)])
    _train_in_process(_common(tiny_model_dir, data) + ["--out", str(run), "--resume"])
    assert json.loads((run / "run_info.resume-4.json").read_text())["resumed_from_step"] == 4
    steps = [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["type"] == "train"]
    assert steps == list(range(1, 9))  # steps 5.. replayed once, the crashed step 5 record dropped
    a, b = _adapter(ref, 8), _adapter(run, 8)
    for k in a:  # same data order, RNG (dropout) and optimizer state: the same weights as without the crash
        assert torch.allclose(a[k], b[k], atol=1e-6), k


def test_nan_guard_stops_with_last_good_checkpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("MEDQA_FAULT", "nan@3")
    cfg = tiny_config(tmp_path / "run", optim={"max_steps": 6}, run={"save_every": 1})
    with pytest.raises(TrainingDiverged) as e:
        train(cfg, train_items=tiny_items(8), val_items=[], bundle=tiny_bundle())
    msg = str(e.value)
    assert "non-finite training loss" in msg and "step 3" in msg and "step-000002" in msg and "--resume" in msg
    ck = tmp_path / "run" / "checkpoints"
    assert json.loads((ck / "latest.json").read_text())["step"] == 2
    from safetensors.torch import load_file

    for v in load_file(str(ck / "step-000002" / "adapter_model.safetensors")).values():
        assert torch.isfinite(v).all()
    assert not (tmp_path / "run" / "adapter").exists()


def test_eval_by_accuracy_picks_best_and_calibrates(tmp_path):
    cfg = tiny_config(tmp_path / "run", optim={"max_steps": 4}, eval={"every": 2, "calibrate": True, "batch_size": 8})
    res = train(cfg, train_items=tiny_items(8), val_items=tiny_items(24, seed=5), bundle=tiny_bundle())
    evals = [r for r in map(json.loads, (res.run_dir / "metrics.jsonl").read_text().splitlines()) if r["type"] == "eval"]
    assert [r["step"] for r in evals] == [0, 2, 4]  # step 0 = the base model, the bar an adapter must clear
    best = json.loads((res.run_dir / "best" / "best.json").read_text())
    assert best["step"] == res.best_step and best["val_accuracy"] == max(r["val_accuracy"] for r in evals)
    cal = json.loads((res.adapter_dir / "calibration.json").read_text())
    assert cal["temperature"] > 0 and res.temperature == cal["temperature"]
    cfg_text = (res.run_dir / "config.yaml").read_text()
    info = json.loads((res.run_dir / "run_info.json").read_text())
    assert "preset: default" in cfg_text and "torch" in info["versions"] and info["trainable_parameters"] > 0


def test_sigint_saves_and_exits_cleanly(tmp_path, tiny_model_dir):
    import signal
    import time

    data = write_jsonl(tmp_path / "train.jsonl", tiny_items(12))
    run = tmp_path / "run"
    args = _common(tiny_model_dir, data) + ["--out", str(run), "--max-steps", "100000", "--save-every", "0",
                                            "--log-every", "1"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "medqa", "train", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    metrics = run / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "--resume" in out
    latest = json.loads((run / "checkpoints" / "latest.json").read_text())
    assert latest["step"] >= 2
