"""Load a causal LM + tokenizer (+ LoRA adapter) on any device.

``--model`` accepts the embedded default (``embedded``), a Hub id, a local folder, or a ``.gguf`` file
(converted once into a cached safetensors folder, like the embedded model).
"""
from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .device import DeviceInfo, detect_device, pick_dtype
from .embedded import EMBEDDED_ALIASES, cache_root, convert_gguf, ensure_embedded
from .records import MedQAError
from .utils.io import file_lock

log = logging.getLogger(__name__)


@dataclass
class ModelBundle:
    model: Any
    tokenizer: Any
    device: DeviceInfo
    dtype: Any
    model_id: str  # what the user asked for
    model_path: str  # what was loaded
    adapter: str | None = None
    load_seconds: float = 0.0
    extras: dict = field(default_factory=dict)


def resolve_model_path(model: str) -> str:
    """Map ``--model`` to something ``from_pretrained`` accepts, converting GGUF files on first use."""
    if model in EMBEDDED_ALIASES:
        return str(ensure_embedded())
    p = Path(model).expanduser()
    if p.suffix == ".gguf":
        if not p.is_file():
            raise MedQAError(f"--model {model}: GGUF file not found")
        st = p.stat()
        key = hashlib.sha1(f"{p.resolve()}:{st.st_size}:{st.st_mtime_ns}".encode()).hexdigest()[:12]
        out = cache_root() / "gguf-converted" / f"{p.stem}-{key}"
        if not (out / "config.json").exists():
            with file_lock(out.with_suffix(".lock")):
                if not (out / "config.json").exists():
                    convert_gguf(p, out)
        return str(out)
    if p.exists():
        if not (p / "config.json").exists():
            hint = " (it looks like a LoRA adapter: pass it as --adapter)" if (p / "adapter_config.json").exists() else ""
            raise MedQAError(f"--model {model}: folder has no config.json{hint}")
        return str(p)
    if model.count("/") == 1 and not model.startswith((".", "/")):
        return model  # Hub id; from_pretrained downloads or reads the HF cache
    raise MedQAError(f"--model {model}: not a folder, .gguf file, Hub id (owner/name) or 'embedded'")


def decoder_and_head(model):
    """Split a causal LM (possibly PEFT-wrapped) into ``(decoder stack, lm_head, final_logit_softcap)``, or None.

    Scoring, training and the logprobs endpoint run the decoder once and apply the 262k-wide LM head only
    where they need logits.  PEFT injects LoRA layers in place, so the unwrapped decoder includes the adapter.
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = getattr(base, getattr(base, "base_model_prefix", "model"), None)
    head = base.get_output_embeddings() if hasattr(base, "get_output_embeddings") else None
    if decoder is None or head is None or decoder is base:
        return None
    return decoder, head, getattr(getattr(base, "config", None), "final_logit_softcapping", None)


def prepare_tokenizer(tok) -> None:
    """Padding conventions shared by training, scoring and generation.

    Trap: many causal LMs ship without a pad token; we reuse EOS for padding *only as a filler id* —
    labels and scoring positions always come from the attention mask, never from ``input_ids == pad``,
    so an EOS the model must learn is never masked out.
    """
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "right"


def load_model(
    model: str = "embedded",
    adapter: str | None = None,
    device: str = "auto",
    dtype: str = "auto",
    trainable_adapter: bool = False,
) -> ModelBundle:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    info = detect_device(device)
    torch_dtype = pick_dtype(info, dtype)
    path = resolve_model_path(model)
    try:
        tok = AutoTokenizer.from_pretrained(path)
        lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    except OSError as e:
        raise MedQAError(
            f"could not load --model {model}: {str(e).splitlines()[0]} "
            "(offline? set HF_HUB_OFFLINE=1 and use a local folder, a .gguf file, or --model embedded)"
        ) from e
    prepare_tokenizer(tok)
    if adapter:
        lm = attach_adapter(lm, adapter, trainable=trainable_adapter)
    lm.to(info.device)
    lm.eval()
    return ModelBundle(lm, tok, info, torch_dtype, model, path, adapter, time.time() - t0)


def attach_adapter(lm, adapter: str, trainable: bool = False):
    from peft import PeftModel

    p = Path(adapter).expanduser()
    if p.exists() and not (p / "adapter_config.json").exists():
        raise MedQAError(f"--adapter {adapter}: folder has no adapter_config.json (is it a LoRA adapter folder?)")
    try:
        return PeftModel.from_pretrained(lm, str(p) if p.exists() else adapter, is_trainable=trainable)
    except (OSError, ValueError) as e:
        raise MedQAError(f"could not load --adapter {adapter}: {str(e).splitlines()[0]}") from e
