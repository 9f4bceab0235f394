"""The same `medqa train` under torchrun with 2 CPU processes (gloo/DDP) matches 1 process within tolerance."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import torch
from train_helpers import tiny_items, write_jsonl

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(cmd, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=240)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-4000:]}"
    return proc


def test_ddp_two_cpu_processes_match_one(tmp_path, tiny_model_dir):
    data = write_jsonl(tmp_path / "train.jsonl", tiny_items(24))
    val = write_jsonl(tmp_path / "val.jsonl", tiny_items(6, seed=3))
    common = ["--model", str(tiny_model_dir), "--data", str(data), "--val-data", str(val), "--dataset", "generic",
              "--task", "", "--device", "cpu", "--threads", "1", "--max-steps", "4", "--grad-accum", "2",
              "--lora-dropout", "0", "--lr", "5e-3", "--eval-every", "2", "--no-calibrate", "--no-progress",
              "--max-length", "96", "--no-dedup-eval", "--save-every", "4"]
    one, two = tmp_path / "one", tmp_path / "two"
    from medqa.cli import build_parser
    from medqa.training.config import from_args
    from medqa.training.loop import train

    train(from_args(build_parser().parse_args(["train", *common, "--batch-size", "4", "--out", str(one)])))
    p = _run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
              "--master_port", str(_free_port()), "-m", "medqa", "train", *common, "--batch-size", "2",
              "--out", str(two)], tmp_path)
    assert "MULTI_CPU, 2 processes" in p.stdout
    info = json.loads((two / "run_info.json").read_text())
    assert info["world_size"] == 2 and info["device"]["distributed"] == "MULTI_CPU"

    def losses(run):
        return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["type"] == "train"]

    l1, l2 = losses(one), losses(two)
    assert len(l1) == len(l2) == 4
    assert all(abs(a - b) < 1e-4 for a, b in zip(l1, l2)), (l1, l2)
    from safetensors.torch import load_file

    a = load_file(str(one / "checkpoints" / "step-000004" / "adapter_model.safetensors"))
    b = load_file(str(two / "checkpoints" / "step-000004" / "adapter_model.safetensors"))
    for k in a:
        assert torch.allclose(a[k], b[k], atol=1e-5), k
    assert (two / "adapter" / "adapter_model.safetensors").is_file()  # the main process wrote the outputs
