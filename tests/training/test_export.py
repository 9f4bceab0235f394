"""`medqa export`: adapter + vLLM files, merged model equals base + adapter, plain peft loads the adapter."""
from __future__ import annotations

import json

import pytest
import torch
from train_helpers import tiny_config, tiny_items

from medqa.records import MedQAError
from medqa.training.export import export
from medqa.training.loop import train


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_model_dir):
    from medqa.modeling import load_model

    out = tmp_path_factory.mktemp("exp") / "run"
    bundle = load_model(str(tiny_model_dir), device="cpu")
    cfg = tiny_config(out, optim={"max_steps": 3, "lr": 2e-2}, model={"name": str(tiny_model_dir)})
    return train(cfg, train_items=tiny_items(8), val_items=[], bundle=bundle)


def test_adapter_loads_with_plain_peft_and_merge_matches(trained, tiny_model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    model = PeftModel.from_pretrained(base, str(trained.adapter_dir)).eval()
    ids = torch.tensor([[2, 10, 20, 30, 40]])
    with torch.no_grad():
        want = model(ids).logits
    res = export(trained.adapter_dir, tmp_path / "merged", merge=True, model=str(tiny_model_dir))
    merged = AutoModelForCausalLM.from_pretrained(res["out"]).eval()
    with torch.no_grad():
        got = merged(ids).logits
    assert torch.allclose(want, got, atol=1e-4)
    size = (trained.adapter_dir / "adapter_model.safetensors").stat().st_size
    assert size < 2_000_000


def test_export_adapter_writes_vllm_files(trained, tiny_model_dir, tmp_path):
    res = export(trained.adapter_dir, tmp_path / "lora", model=str(tiny_model_dir))
    out = tmp_path / "lora"
    v = json.loads((out / "vllm.json").read_text())
    assert "--enable-lora" in v["command"] and v["max_lora_rank"] >= 8 and (out / "adapter_config.json").is_file()
    assert (out / "serve_vllm.sh").read_text().startswith("#!/bin/sh") and not res["merged"]
    with pytest.raises(MedQAError, match="not empty"):
        export(trained.adapter_dir, out)


def test_push_to_hub_failure_keeps_the_local_adapter(trained, monkeypatch, capsys):
    import huggingface_hub

    from medqa.training.loop import push_to_hub

    def offline(*a, **k):
        raise ConnectionError("Hub unreachable")

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", offline)
    assert push_to_hub(trained.adapter_dir, "someone/medqa-lora") is False
    out = capsys.readouterr().out
    assert "push-to-hub someone/medqa-lora failed" in out and str(trained.adapter_dir) in out
