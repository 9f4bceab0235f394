from pathlib import Path

import pytest
import torch

from medqa.modeling import load_model, resolve_model_path
from medqa.records import MedQAError
from medqa.testing import save_tiny


def test_load_local_tiny_folder(tmp_path):
    path = save_tiny(tmp_path / "tiny")
    b = load_model(path, device="cpu")
    assert b.dtype is torch.float32 and b.tokenizer.pad_token_id == 0
    out = b.model(torch.tensor([[2, 5, 6]]))
    assert out.logits.shape[-1] == len(b.tokenizer)


def test_bad_model_arguments_are_clear(tmp_path):
    with pytest.raises(MedQAError, match="GGUF file not found"):
        resolve_model_path(str(tmp_path / "x.gguf"))
    (tmp_path / "adapter").mkdir()
    (tmp_path / "adapter" / "adapter_config.json").write_text("{}")
    with pytest.raises(MedQAError, match="pass it as --adapter"):
        resolve_model_path(str(tmp_path / "adapter"))
    with pytest.raises(MedQAError, match="not a folder"):
        resolve_model_path("./nope")


def test_bad_adapter_folder(tmp_path):
    path = save_tiny(tmp_path / "tiny")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MedQAError, match="adapter_config.json"):
        load_model(path, adapter=str(tmp_path / "empty"), device="cpu")


@pytest.mark.real_model
def test_embedded_model_loads_from_the_converted_cache():
    load_model("embedded")  # first call may convert (~100 s once per machine)
    b = load_model("embedded")
    # the second load reads the cached safetensors folder, never the GGUF (its time: `medqa doctor`)
    assert (Path(b.model_path) / "model.safetensors").exists() and not b.model_path.endswith(".gguf")
    print(f"cached embedded load: {b.load_seconds:.1f} s")
    tok = b.tokenizer
    assert (tok.pad_token_id, tok.eos_token_id, tok.bos_token_id) == (0, 1, 2)
    assert b.model.config.model_type.startswith("gemma3")
    # real weights, not random ones: English text has low perplexity (a random init gives ~ln(262k) = 12.5 nats)
    ids = torch.tensor([tok("The heart pumps blood through the arteries to the rest of the body.")["input_ids"]])
    with torch.inference_mode():
        nll = b.model(ids, labels=ids).loss.item()
    assert nll < 5.0, nll
