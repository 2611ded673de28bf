"""int8 linear layers for the tagger's blocks on a CPU without native bfloat16.

The quantisation is torchao's ``Int8DynamicActivationInt8WeightConfig`` (symmetric, one
scale per weight row and one per input token: a text's features do not depend on its
batch), computed to the bit as torchao computes it (``tests/detect/test_int8.py`` checks
against torchao itself), without the work torchao's CPU path repeats (docs/results.md):

- **one quantisation per input.** The query, key and value projections read the same
  hidden states, as do the gate and up projections; the input is quantised once for each
  group (:class:`SharedInput`), not once per layer;
- **no per-call work on the weights, and in-place rescaling.** torchao sums the weight's
  columns on every call (the u8s8 correction), widens the input to int32 to shift it, and
  allocates a new tensor for each step of the rescale; here the sums are kept with the
  weights, the shift flips the sign bit, and the rescale runs in place.

On a CPU without AMX the inputs are shifted to unsigned (u8s8, the form VNNI and AVX2's
``vpmaddubsw`` multiply) and the shift is subtracted through the column sums, as torchao
does with VNNI. torchao multiplies int8 × int8 without VNNI, which oneDNN runs 12-18 %
slower on AVX2 (docs/results.md); the integer sums, and so the outputs, are the same
either way. With AMX, int8 × int8 as torchao (AMX's own form). Without VNNI
(or where ``ONEDNN_MAX_CPU_ISA`` caps oneDNN below it) the ranges are halved so that the
16-bit partial sums of AVX2's products cannot saturate (``reduce_range``: a pair of
shifted inputs in [64, 191] times weights in [-64, 63] sums to at most 24,448 < 2^15).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TypeGuard

import torch
from torch import nn

from privlm.detect.fixed_rows import in_fixed_rows

EPS = torch.finfo(torch.float32).eps
U8_SHIFT = 128


@dataclass(frozen=True)
class Int8Mode:
    """How the products run here: ``unsigned`` inputs (u8s8, without AMX) and
    ``reduce_range`` (halved ranges, without VNNI)."""

    unsigned: bool
    reduce_range: bool

    @property
    def bounds(self) -> tuple[int, int]:
        lo, hi = -128, 127
        return (lo // 2, hi // 2) if self.reduce_range else (lo, hi)


def symmetric_rows(x: torch.Tensor, bounds: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
    """``x`` (rows × columns, float32) as integers in ``bounds`` (still float32) and each
    row's scale: torchao's symmetric per-row choice, ``max(|min|, |max|) / ((hi - lo) / 2)``
    clamped below at float32's eps, and ``clamp(round(x · (1 / scale)), lo, hi)``."""
    lo, hi = bounds
    # amax and amin: torch.aminmax is 20x slower here. max(max, -min) is torchao's
    # max(|min|, |max|) of each row (negation is exact; a zero row gets eps either way)
    high = x.amax(dim=-1, keepdim=True)
    reach = torch.maximum(high, x.amin(dim=-1, keepdim=True).neg_())
    scale = reach.div_(float(hi - lo) / 2).clamp_(min=EPS)
    q = x * scale.reciprocal()  # 1 / scale, exactly as torchao's
    return q.round_().clamp_(lo, hi), scale


Held = tuple[torch.Tensor, int, torch.Tensor, torch.Tensor]  # input, its version, ints, scales


def _holds(held: Held | None, x: torch.Tensor) -> TypeGuard[Held]:
    return held is not None and held[0] is x and held[1] == x._version


class SharedInput:
    """The quantised form of the last input a group of layers read: layers that read the
    same tensor (q, k, v; gate, up) quantise it once. Held by identity and version, so a
    new or modified tensor is always quantised afresh; held as one tuple, read once per
    call, so two threads running one body can cost each other a quantisation, never mix
    their inputs."""

    def __init__(self, mode: Int8Mode) -> None:
        self.mode = mode
        self._held: Held | None = None

    def quantised(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(the rows as int8, or uint8 shifted by 128 for u8s8; each row's scale)."""
        held = self._held
        if _holds(held, x):
            return held[2], held[3]
        q, scale = symmetric_rows(x.reshape(-1, x.shape[-1]).float(), self.mode.bounds)
        ints = q.to(torch.int8)
        if self.mode.unsigned:  # v + 128 as uint8 is v's bits with the sign bit flipped
            ints = ints.view(torch.uint8).bitwise_xor_(U8_SHIFT)
        self._held = (x, x._version, ints, scale)
        return ints, scale

    def holds(self, x: torch.Tensor) -> bool:
        """Whether ``x``, as it is now, is the input held."""
        return _holds(self._held, x)

    def clear(self) -> None:
        """Drop the held input (called after each forward pass, so nothing stays alive)."""
        self._held = None


class Int8Linear(nn.Module):
    """A bias-free or biased linear layer with int8 weights (one scale per output row) and
    int8 inputs (one scale per token), float32 out. ``rows``: the products run in calls of
    exactly that many rows (:mod:`privlm.detect.fixed_rows`; None: one call)."""

    weight_t: torch.Tensor
    weight_scale: torch.Tensor
    shift: torch.Tensor | None
    bias: torch.Tensor | None

    def __init__(self, linear: nn.Linear, shared: SharedInput) -> None:
        super().__init__()
        mode = shared.mode
        q, scale = symmetric_rows(linear.weight.detach().float(), mode.bounds)
        weight_t = q.to(torch.int8).t().contiguous()  # [in, out]: oneDNN's faster layout
        self.register_buffer("weight_t", weight_t, persistent=False)
        self.register_buffer("weight_scale", scale.flatten(), persistent=False)
        shift = weight_t.sum(dim=0, keepdim=True, dtype=torch.int32) * U8_SHIFT
        self.register_buffer("shift", shift if mode.unsigned else None, persistent=False)
        bias = None if linear.bias is None else linear.bias.detach().float()
        self.register_buffer("bias", bias, persistent=False)
        self.shared = shared
        self.rows: int | None = None
        self.in_features, self.out_features = linear.in_features, linear.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ints, scale = self.shared.quantised(x)
        if self.rows is None:
            acc = torch._int_mm(ints, self.weight_t)
        else:
            acc = in_fixed_rows(lambda r: torch._int_mm(r, self.weight_t), ints, self.rows)
        if self.shift is not None:
            acc.sub_(self.shift)
        # float32 in torchao's order, (acc · token scale) · row scale; cast first, then in
        # place: the same bits as torch.mul(acc, scale), whose mixed-dtype path is 1.5-2x
        # slower here (docs/results.md)
        y = acc.to(torch.float32).mul_(scale).mul_(self.weight_scale)
        if self.bias is not None:
            y.add_(self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


ONEDNN_WITHOUT_VNNI = ("SSE41", "AVX", "AVX2", "AVX512_CORE")


def onednn_isa_cap() -> str:
    """The instruction set ``ONEDNN_MAX_CPU_ISA`` caps oneDNN at, upper case ("" when
    uncapped)."""
    return os.environ.get("ONEDNN_MAX_CPU_ISA", "").strip().upper()


def runs_without_vnni() -> bool:
    """Whether the int8 products run without VNNI here: their 16-bit partial sums then
    saturate unless the value ranges are halved (``reduce_range``). True on a CPU without
    AVX512-VNNI, or where ``ONEDNN_MAX_CPU_ISA`` caps oneDNN below it."""
    return onednn_isa_cap() in ONEDNN_WITHOUT_VNNI or not torch.cpu._is_vnni_supported()


def int8_mode(without_vnni: bool | None = None) -> Int8Mode:
    """Unsigned inputs where the CPU has no AMX (the faster form there), halved
    ranges where the products run ``without_vnni`` (default: as :func:`runs_without_vnni`
    finds here)."""
    unsigned = not torch.cpu._is_amx_tile_supported()
    halved = runs_without_vnni() if without_vnni is None else without_vnni
    return Int8Mode(unsigned=bool(unsigned), reduce_range=halved)


def quantise_linears(module: nn.Module, mode: Int8Mode) -> SharedInput:
    """Replace every ``nn.Linear`` inside ``module`` by an :class:`Int8Linear`, all
    sharing one :class:`SharedInput` (layers called in turn on the same tensor quantise
    it once), cleared after each forward pass of ``module``."""
    shared = SharedInput(mode)
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Linear):
                setattr(parent, name, Int8Linear(child, shared))
    module.register_forward_hook(lambda *_: shared.clear())
    return shared
