"""What produced a run: git commit, library versions, device and command line."""
from __future__ import annotations

import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

LIBRARIES = ("medqa", "torch", "transformers", "peft", "accelerate", "datasets", "safetensors", "numpy", "tokenizers")


def git_commit(path: str | Path | None = None) -> dict:
    """``{"commit": sha, "dirty": bool}`` of the repo holding ``path`` (default: this package), or {} outside git."""
    where = Path(path) if path else Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10)
        if sha.returncode != 0:
            return {}
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                               capture_output=True, text=True, timeout=10)
        return {"commit": sha.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {}


def versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for lib in LIBRARIES:
        try:
            out[lib] = metadata.version(lib)
        except metadata.PackageNotFoundError:
            continue
    try:
        import torch

        out["torch_build"] = (f"ROCm {torch.version.hip}" if getattr(torch.version, "hip", None)
                              else f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU")
    except ImportError:
        pass
    return out


def collect(command: str = "", device: dict | None = None, world_size: int = 1) -> dict:
    return {"command": command, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "git": git_commit(),
            "versions": versions(), "platform": platform.platform(), "host_cpus": _cpus(),
            "device": device or {}, "world_size": world_size}


def _cpus() -> int | None:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count()


def peak_gpu_mb(device=None) -> float | None:
    """Peak memory torch allocated on the CUDA/ROCm device (``device``, else the current one) in MiB; None
    without such a device."""
    import torch

    if not torch.cuda.is_available() or (device is not None and device.type != "cuda"):
        return None
    return torch.cuda.max_memory_allocated(device) / 2**20


def peak_rss_mb() -> float:
    """Peak resident memory of this process in MiB (Linux ru_maxrss is KiB, macOS bytes)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / 2**20 if sys.platform == "darwin" else r / 1024
