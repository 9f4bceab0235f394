"""Config: presets = configs/*.yaml, YAML round trip, precedence defaults → preset → file → flags, validation."""
from __future__ import annotations

import pytest

from medqa.cli import build_parser
from medqa.records import MedQAError
from medqa.training.config import CONFIG_DIR, TrainConfig, from_args, preset_config


@pytest.mark.parametrize("name", ["seed", "default", "gpu"])
def test_preset_files_match_presets(name):
    assert TrainConfig.from_yaml(CONFIG_DIR / f"{name}.yaml") == preset_config(name)


def test_seed_preset_is_the_published_recipe():
    c = preset_config("seed")
    assert (c.lora.r, c.lora.alpha, c.lora.dropout, c.lora.target_modules) == (8, 16.0, 0.05, ["q_proj", "v_proj"])
    assert (c.optim.lr, c.optim.scheduler, c.optim.warmup_ratio, c.optim.epochs) == (2e-4, "cosine", 0.05, 2.0)
    assert (c.optim.batch_size, c.optim.grad_accum, c.model.gradient_checkpointing, c.data.max_length) == (4, 4, True, 256)


def test_gpu_preset_is_default_with_one_forward_pass_per_step():
    d, g = preset_config("default").to_dict(), preset_config("gpu").to_dict()
    assert g["optim"]["batch_size"] * g["optim"]["grad_accum"] == d["optim"]["batch_size"] * d["optim"]["grad_accum"]
    assert g["optim"]["grad_accum"] == 1
    for sec in ("model", "lora", "data", "eval"):
        assert g[sec] == d[sec], sec
    assert {k for k in d["optim"] if d["optim"][k] != g["optim"][k]} == {"batch_size", "grad_accum"}


def test_yaml_round_trip_keeps_command(tmp_path):
    cfg = preset_config("default")
    cfg.optim.lr = 3e-4
    text = cfg.to_yaml(tmp_path / "c.yaml", command="medqa train --lr 3e-4")
    assert text.startswith("# medqa training config") and "# command: medqa train --lr 3e-4" in text
    assert TrainConfig.from_yaml(tmp_path / "c.yaml") == cfg


def test_flags_override_file_override_preset(tmp_path):
    p = tmp_path / "c.yaml"
    c = preset_config("seed")
    c.optim.epochs = 5.0
    c.to_yaml(p)
    args = build_parser().parse_args(["train", "--config", str(p), "--lr", "0.002", "--target-modules",
                                      "q_proj,k_proj", "--no-group-by-length"])
    cfg = from_args(args)
    assert cfg.optim.epochs == 5.0 and cfg.optim.lr == 0.002 and cfg.lora.r == 8  # file, flag, file's preset
    assert cfg.lora.target_modules == ["q_proj", "k_proj"] and cfg.data.group_by_length is False
    assert from_args(build_parser().parse_args(["train", "--preset", "seed"])) == preset_config("seed")


@pytest.mark.parametrize("argv, flag", [(["--lora-r", "0"], "--lora-r"), (["--lr", "5"], "--lr"),
                                        (["--val-fraction", "1.5"], "--val-fraction"),
                                        (["--lora-layers", "top:x"], "--lora-layers")])
def test_validation_names_the_flag(argv, flag):
    with pytest.raises(MedQAError, match=flag):
        from_args(build_parser().parse_args(["train", *argv]))


def test_unknown_yaml_key_is_an_error(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("optim:\n  learning_rate: 1e-3\n")
    with pytest.raises(MedQAError, match="optim.learning_rate"):
        TrainConfig.from_yaml(p)
