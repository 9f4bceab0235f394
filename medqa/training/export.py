"""Export an adapter for serving: merged full model, or the adapter plus what vLLM ``--enable-lora`` needs.

vLLM serves LoRA adapters next to an unmodified base (``--enable-lora --lora-modules NAME=DIR``) when the
adapter folder holds ``adapter_config.json`` + ``adapter_model.safetensors``, targets supported modules, and
``--max-lora-rank`` is at least the adapter's rank.  We write ``vllm.json`` and ``serve_vllm.sh`` with those
values, and a merged model folder (``--merge``) for servers without LoRA support.
"""
from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

from ..records import MedQAError
from ..utils.io import atomic_dir, atomic_write_json

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "calibration.json", "README.md")
VLLM_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


def read_adapter_config(adapter: Path) -> dict:
    p = Path(adapter) / "adapter_config.json"
    if not p.is_file():
        raise MedQAError(f"--adapter {adapter}: no adapter_config.json (is it a LoRA adapter folder, e.g. "
                         "runs/train-.../adapter?)")
    return json.loads(p.read_text(encoding="utf-8"))


def vllm_info(adapter_cfg: dict, base: str, adapter_dir: str, name: str = "medqa") -> dict:
    r = int(adapter_cfg.get("r", 16))
    max_rank = next((x for x in VLLM_RANKS if x >= r), r)
    cmd = ["vllm", "serve", base, "--enable-lora", "--lora-modules", f"{name}={adapter_dir}",
           "--max-lora-rank", str(max_rank)]
    return {"base_model": base, "adapter": adapter_dir, "lora_name": name, "max_lora_rank": max_rank,
            "target_modules": adapter_cfg.get("target_modules"), "command": " ".join(shlex.quote(c) for c in cmd),
            "note": "requests use model=<lora_name>; the calibration temperature in calibration.json is applied by "
                    "medqa clients, not by vLLM"}


def export(adapter: str | Path, out: str | Path, merge: bool = False, model: str | None = None,
           dtype: str = "auto") -> dict:
    """Write ``out``: the adapter (+ vLLM files), or with ``merge`` a full merged model folder."""
    adapter = Path(adapter).expanduser()
    acfg = read_adapter_config(adapter)
    base_id = model or acfg.get("base_model_name_or_path") or "embedded"
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise MedQAError(f"--out {out} exists and is not empty; choose a new folder")
    if not merge:
        with atomic_dir(out) as tmp:
            for f in ADAPTER_FILES:
                if (adapter / f).is_file():
                    shutil.copy2(adapter / f, tmp / f)
            info = vllm_info(acfg, base_id, str(out.resolve()))
            atomic_write_json(tmp / "vllm.json", info)
            (tmp / "serve_vllm.sh").write_text("#!/bin/sh\n# serve the base model with this adapter (vLLM)\n"
                                               f"exec {info['command']} \"$@\"\n", encoding="utf-8")
            (tmp / "serve_vllm.sh").chmod(0o755)
        return {"out": str(out), "merged": False, "vllm": info}

    from ..modeling import load_model

    bundle = load_model(base_id, adapter=str(adapter), device="cpu", dtype=dtype if dtype != "auto" else "fp32")
    merged = bundle.model.merge_and_unload()
    with atomic_dir(out) as tmp:
        merged.save_pretrained(str(tmp), safe_serialization=True)
        bundle.tokenizer.save_pretrained(str(tmp))
        for f in ("calibration.json", "README.md"):
            if (adapter / f).is_file():
                shutil.copy2(adapter / f, tmp / f)
        info = {"base_model": base_id, "base_path": bundle.model_path, "adapter": str(adapter), "merged": True,
                "command": f"vllm serve {shlex.quote(str(out.resolve()))}"}
        atomic_write_json(tmp / "export.json", info)
    return {"out": str(out), "merged": True, "vllm": info}
