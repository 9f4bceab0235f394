"""Device and dtype selection for ROCm, CUDA, MPS and CPU — no CUDA-only code paths.

ROCm builds of PyTorch expose AMD GPUs through the ``torch.cuda`` API; ``torch.version.hip`` tells
them apart.  Nothing ROCm-specific is hard-coded: ``HSA_OVERRIDE_GFX_VERSION`` is only ever read from
the user's environment (setting it to 9.4.2 is right for MI300X and wrong for every other chip).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .records import MedQAError

DTYPES = ("auto", "bf16", "fp16", "fp32")


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # "rocm" | "cuda" | "mps" | "cpu"
    device: str  # torch device string, e.g. "cuda:0"
    name: str
    arch: str  # e.g. "gfx942", "sm_90", "x86_64"
    bf16: bool
    fp16: bool


def torch_build() -> str:
    import torch

    if getattr(torch.version, "hip", None):
        return f"ROCm {torch.version.hip}"
    if torch.version.cuda:
        return f"CUDA {torch.version.cuda}"
    return "CPU"


def detect_device(requested: str = "auto") -> DeviceInfo:
    """Resolve ``--device`` (auto|cpu|cuda[:N]|rocm[:N]|mps) to a DeviceInfo, failing clearly."""
    import platform

    import torch

    req = (requested or "auto").lower()
    if req.startswith("rocm"):  # ROCm devices are addressed as cuda:N in PyTorch
        req = "cuda" + req[4:]
    if req == "auto":
        if torch.cuda.is_available():
            req = "cuda:0"
        elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            req = "mps"
        else:
            req = "cpu"
    if req.startswith("cuda"):
        if not torch.cuda.is_available():
            raise MedQAError(
                f"--device {requested} asked for a GPU but this PyTorch ({torch_build()}) sees none; "
                "run `medqa doctor` for the fix, or use --device cpu"
            )
        idx = int(req.split(":")[1]) if ":" in req else 0
        props = torch.cuda.get_device_properties(idx)
        hip = bool(getattr(torch.version, "hip", None))
        arch = getattr(props, "gcnArchName", "") if hip else f"sm_{props.major}{props.minor}"
        return DeviceInfo(
            kind="rocm" if hip else "cuda",
            device=f"cuda:{idx}",
            name=props.name,
            arch=(arch or "").split(":")[0],
            bf16=bool(torch.cuda.is_bf16_supported()),
            fp16=True,
        )
    if req == "mps":
        if not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
            raise MedQAError("--device mps asked for Apple MPS but it is not available; use --device cpu")
        return DeviceInfo("mps", "mps", "Apple MPS", platform.machine(), bf16=True, fp16=True)
    if req == "cpu":
        return DeviceInfo("cpu", "cpu", _cpu_name(), platform.machine(), bf16=True, fp16=False)
    raise MedQAError(f"unknown --device {requested!r}; use auto, cpu, cuda[:N], rocm[:N] or mps")


def _cpu_name() -> str:
    import platform

    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "CPU"


def pick_dtype(info: DeviceInfo, requested: str = "auto"):
    """``--dtype auto``: bf16 where the GPU supports it, else fp16 on GPU, fp32 on CPU.

    CPU gets fp32 even though bf16 kernels exist: on AVX2-only CPUs bf16 matmuls are emulated and slower.
    """
    import torch

    req = (requested or "auto").lower()
    table = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
             "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}
    if req == "auto":
        if info.kind == "cpu":
            return torch.float32
        return torch.bfloat16 if info.bf16 else torch.float16
    if req not in table:
        raise MedQAError(f"unknown --dtype {requested!r}; use one of {', '.join(DTYPES)}")
    dtype = table[req]
    if dtype is torch.bfloat16 and not info.bf16:
        raise MedQAError(f"--dtype bf16 is not supported on {info.name}; use --dtype fp16 or auto")
    if dtype is torch.float16 and info.kind == "cpu":
        raise MedQAError("--dtype fp16 is not supported for CPU compute; use --dtype fp32 or bf16")
    return dtype


def rocm_env_notes() -> list[str]:
    """Environment facts worth showing on ROCm; read, never set."""
    notes = []
    for var in ("HSA_OVERRIDE_GFX_VERSION", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "PYTORCH_HIP_ALLOC_CONF"):
        if os.environ.get(var):
            notes.append(f"{var}={os.environ[var]}")
    return notes


def free_memory_gb(info: DeviceInfo) -> float | None:
    import torch

    if info.kind in ("cuda", "rocm"):
        free, _total = torch.cuda.mem_get_info(int(info.device.split(":")[1]))
        return free / 2**30
    try:
        import psutil

        return psutil.virtual_memory().available / 2**30
    except ImportError:
        return None
