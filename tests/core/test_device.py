import pytest
import torch

from medqa.device import detect_device, pick_dtype
from medqa.records import MedQAError


def test_auto_resolves_to_an_available_device():
    info = detect_device("auto")
    expected = "cuda" if torch.cuda.is_available() else ("mps" if torch.backends.mps.is_available() else "cpu")
    assert info.device.startswith(expected)


def test_cpu_defaults_to_fp32_and_rejects_fp16():
    info = detect_device("cpu")
    assert pick_dtype(info, "auto") is torch.float32
    assert pick_dtype(info, "bf16") is torch.bfloat16
    with pytest.raises(MedQAError, match="--dtype"):
        pick_dtype(info, "fp16")
    with pytest.raises(MedQAError, match="unknown --dtype"):
        pick_dtype(info, "int3")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU error path")
def test_gpu_request_without_gpu_is_a_clear_error():
    for req in ("cuda", "rocm:0"):
        with pytest.raises(MedQAError, match="sees none"):
            detect_device(req)


def test_unknown_device():
    with pytest.raises(MedQAError, match="unknown --device"):
        detect_device("tpu")
