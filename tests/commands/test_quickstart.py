"""The README's main job (`medqa quickstart`) end to end on the real embedded Gemma 270M and ../shared/data,
shrunk to 32 training and 20 evaluation questions (~1-2 min on 2 CPU cores)."""
from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.real_model, pytest.mark.slow]


def test_quickstart_trains_evaluates_reports_and_reuses(shared_data, tmp_path, capsys):
    from medqa.cli import main

    out = tmp_path / "qs"
    argv = ["quickstart", "--train-limit", "32", "--eval-limit", "20", "--out", str(out)]
    assert main(argv) == 0
    first = capsys.readouterr().out
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stopped"] == "completed" and summary["speed"]["examples"] == 32
    fe = summary["final_eval"]
    assert fe["n"] == 20 and 0 <= fe["base"]["accuracy"] <= 1 and 0 <= fe["lora"]["accuracy"] <= 1
    adapter = out / "adapter"
    for name in ("adapter_config.json", "adapter_model.safetensors", "calibration.json", "README.md"):
        assert (adapter / name).is_file(), name
    assert (out / "eval" / "base" / "report.md").is_file() and (out / "eval" / "lora" / "report.md").is_file()
    assert "=== MedQA quickstart report ===" in first and f"adapter:  {adapter}" in first

    # a second call reuses the finished run instead of training again
    assert main(argv) == 0
    second = capsys.readouterr().out
    assert "already holds a finished run" in second and "=== MedQA quickstart report ===" in second
