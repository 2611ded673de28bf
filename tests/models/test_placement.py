"""The device and precision policy, on a machine without CUDA."""

from __future__ import annotations

import pytest
import torch

from privlm.errors import ModelLoadError
from privlm.models import load_public_model
from privlm.models.placement import (
    DEVICE_ENV,
    DTYPE_ENV,
    resolve_device,
    resolve_dtype,
    resolve_placement,
)

NO_CUDA = not torch.cuda.is_available()


@pytest.mark.fast
@pytest.mark.skipif(not NO_CUDA, reason="checks the CPU-only defaults")
def test_auto_is_the_cpu_in_float32_without_a_gpu(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    p = resolve_placement()
    assert p.device == torch.device("cpu") and p.dtype == torch.float32
    assert p.describe() == {"device": "cpu", "device_name": "cpu", "dtype": "float32"}


@pytest.mark.fast
@pytest.mark.skipif(not NO_CUDA, reason="checks the refusal on a machine without CUDA")
def test_an_absent_gpu_is_refused_with_the_reason():
    with pytest.raises(ModelLoadError, match="sees no CUDA GPU"):
        resolve_device("cuda")


@pytest.mark.fast
def test_names_and_errors(monkeypatch):
    cpu = torch.device("cpu")
    assert resolve_dtype("bf16", cpu) == resolve_dtype("bfloat16", cpu) == torch.bfloat16
    assert resolve_dtype(torch.float16, cpu) == torch.float16
    with pytest.raises(ModelLoadError, match="unknown dtype"):
        resolve_dtype("int8", cpu)
    with pytest.raises(ModelLoadError, match="unknown device"):
        resolve_device("gpu0")
    with pytest.raises(ModelLoadError, match="cpu or cuda"):
        resolve_device("meta")
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    monkeypatch.setenv(DTYPE_ENV, "bfloat16")
    assert resolve_placement().dtype == torch.bfloat16  # PRIVLM_DTYPE sets the default
    assert resolve_placement("cpu", "float32").dtype == torch.float32  # explicit wins


def test_the_model_is_loaded_where_asked():
    lm = load_public_model("tiny", device="cpu", dtype="bfloat16")
    assert {p.dtype for p in lm.model.parameters()} == {torch.bfloat16}
    assert lm.placement.describe()["dtype"] == "bfloat16"
