"""One device and precision policy for every model privlm loads.

- ``device="auto"`` is ``$PRIVLM_DEVICE`` when set, else CUDA when torch sees a GPU, else
  the CPU. An explicit device that is not there is refused with the reason.
- ``dtype="auto"`` is bfloat16 on a CUDA GPU that supports it, float32 everywhere else.
- Only the model's weights and activations take that dtype. privlm's privacy math never
  runs in half precision: logits are upcast to float64 before any softmax, and every
  divergence, λ/β solve, mixture, vote count and accounting step is float64
  (``docs/sharp_edges.md``, "Precision").

>>> p = resolve_placement("cpu", "auto")
>>> str(p.device), p.dtype
('cpu', torch.float32)
>>> resolve_placement("cpu", "bf16").describe()["dtype"]
'bfloat16'
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from privlm.errors import ModelLoadError

DEVICE_ENV = "PRIVLM_DEVICE"
DTYPE_ENV = "PRIVLM_DTYPE"
DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}

DeviceSpec = str | torch.device | None
DtypeSpec = str | torch.dtype | None
# For loads that run no model: a tokenizer, a conversion to cache. Every capability that
# computes with a model follows the policy.
CPU_FLOAT32: dict[str, Any] = {"device": "cpu", "dtype": "float32"}


@dataclass(frozen=True)
class Placement:
    """Where a model's weights live, and in which precision."""

    device: torch.device
    dtype: torch.dtype

    def describe(self) -> dict[str, Any]:
        """What ``privacy.json``, benchmark JSON and ``--json`` output record."""
        name = "cpu"
        if self.device.type == "cuda":
            name = torch.cuda.get_device_name(self.device)
        return {
            "device": str(self.device),
            "device_name": name,
            "dtype": str(self.dtype).removeprefix("torch."),
        }


def resolve_device(device: DeviceSpec = "auto") -> torch.device:
    """The device to use for ``device`` ("auto", "cpu", "cuda", "cuda:1", …)."""
    spec = "auto" if device is None else device
    if spec == "auto":
        spec = os.environ.get(DEVICE_ENV, "").strip() or "auto"
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(spec)
    except (RuntimeError, TypeError):
        raise ModelLoadError(f"unknown device {spec!r}; use auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ModelLoadError(
                f"device {spec!r} was asked for, but this torch sees no CUDA GPU (a CPU-only "
                "build, or no driver); use --device cpu or auto"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ModelLoadError(
                f"device {spec!r}: this machine has {torch.cuda.device_count()} CUDA GPU(s)"
            )
    elif dev.type != "cpu":
        raise ModelLoadError(f"device {spec!r}: privlm runs on cpu or cuda")
    return dev


def resolve_dtype(dtype: DtypeSpec, device: torch.device) -> torch.dtype:
    """The weights' dtype for ``dtype`` ("auto", "float32", "bf16", …) on ``device``."""
    spec: DtypeSpec = "auto" if dtype is None else dtype
    if spec == "auto":
        spec = os.environ.get(DTYPE_ENV, "").strip() or "auto"
    if isinstance(spec, torch.dtype):
        chosen = spec
    elif spec == "auto":
        bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
        return torch.bfloat16 if bf16 else torch.float32
    elif str(spec).lower() in DTYPES:
        chosen = DTYPES[str(spec).lower()]
    else:
        raise ModelLoadError(f"unknown dtype {spec!r}; use auto, float32, bfloat16 or float16")
    if chosen not in DTYPES.values():
        raise ModelLoadError(f"dtype {chosen} is not one privlm runs models in")
    return chosen


def resolve_placement(device: DeviceSpec = "auto", dtype: DtypeSpec = "auto") -> Placement:
    dev = resolve_device(device)
    return Placement(dev, resolve_dtype(dtype, dev))


def model_placement(model: torch.nn.Module) -> Placement:
    """Where a loaded model actually is."""
    p = next(model.parameters())
    return Placement(p.device, p.dtype)


def module_device(module: torch.nn.Module) -> torch.device:
    """Where ``module``'s weights are (the CPU for a module without any): inputs built for
    it go there."""
    first = next(module.parameters(), None)
    return first.device if first is not None else torch.device("cpu")
