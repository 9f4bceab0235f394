"""Engine.load with a base model, base + LoRA adapter and a merged folder; calibration.json is honoured."""
from __future__ import annotations

import json
import shutil

import pytest

from medqa.engine import Engine
from medqa.records import MedQAError


@pytest.fixture(scope="module")
def adapter_dir(tiny_dir, tmp_path_factory):
    """A LoRA adapter for the tiny model, with a calibration.json as `medqa eval --calibrate-on` writes it."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("adapter") / "lora"
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_dir),
                           LoraConfig(r=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"))
    model.save_pretrained(out)
    (out / "calibration.json").write_text(json.dumps({
        "temperature": 2.0, "style": "medqa", "conformal": {"medmcqa": {"coverage": 0.9, "threshold": 0.7}}}))
    return str(out)


def test_base_model_is_uncalibrated(tiny_dir):
    engine = Engine.load(tiny_dir, device="cpu", threads=0)
    res = engine.answer("Which organ?", ["heart", "lung", "kidney"], max_new_tokens=4)
    assert not res.calibrated and res.temperature == 1.0 and res.conformal_qhat is None
    assert engine.info()["model"] == tiny_dir and engine.info()["can_generate"]


def test_adapter_calibration_is_read_and_can_be_overridden(tiny_dir, adapter_dir):
    engine = Engine.load(tiny_dir, adapter=adapter_dir, device="cpu", threads=0, abstain_below=0.0)
    res = engine.answer("Which organ?", ["heart", "lung", "kidney"], explain=False)
    assert res.calibrated and res.temperature == 2.0 and res.conformal_qhat == 0.7
    assert res.model == f"{tiny_dir}+{adapter_dir}"
    plain = Engine.load(tiny_dir, adapter=adapter_dir, device="cpu", temperature=None, conformal_qhat=None)
    assert not plain.calibrated and plain.conformal_qhat is None
    fixed = Engine.load(tiny_dir, adapter=adapter_dir, device="cpu", temperature=1.5)
    assert fixed.temperature == 1.5 and fixed.calibrated


def test_merged_model_folder_carries_its_calibration(tiny_dir, tmp_path):
    merged = tmp_path / "merged"
    shutil.copytree(tiny_dir, merged)
    (merged / "calibration.json").write_text(json.dumps({"temperature": 0.8}))
    engine = Engine.load(str(merged), device="cpu")
    assert engine.temperature == 0.8 and engine.calibrated and engine.conformal_qhat is None


def test_broken_calibration_file_is_a_clear_error(tiny_dir, tmp_path):
    merged = tmp_path / "merged"
    shutil.copytree(tiny_dir, merged)
    (merged / "calibration.json").write_text("{not json")
    with pytest.raises(MedQAError, match="calibration"):
        Engine.load(str(merged), device="cpu")
