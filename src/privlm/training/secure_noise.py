"""DP-SGD's noise and Poisson coins straight from the OS CSPRNG.

privlm's default DP-SGD noise comes from a torch generator whose whole state is drawn from
the OS CSPRNG (:mod:`privlm.randomness`): unpredictable to anyone who did not see the state,
but a Mersenne Twister or Philox stream, so an adversary who recovers some outputs can
predict the rest. Opacus's own secure mode needs ``torchcsprng``, which has no build for
torch 2.13. ``DpSgdConfig(secure_mode=True)`` uses this module instead:

- **noise:** every Gaussian coordinate is (Z₁ + Z₂ + Z₃ + Z₄)/2 of four standard normals made
  by Box–Muller in float64 from 53-bit ``os.urandom`` uniforms, times σC. Summing 2n = 4
  normals is the defence against floating-point attacks on the Gaussian's low bits (Holohan
  & Braghin 2021, §5.1; Opacus's secure mode does the same). Drawn on the CPU, then moved to
  the gradient's device and dtype.
- **Poisson coins:** each example (or user) is kept when a CSPRNG uniform is below q.

The accounting is unchanged: it is the same mechanism with better randomness.
``bench/bench_dpsgd_step.py`` (mode ``secure``) measures what it costs per step.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from privlm.randomness import PrivacyRandomness, csprng_uniforms

SECURE_STATEMENT = {
    "randomness": "secure mode: every noise coordinate and Poisson coin from os.urandom",
    "seed": None,
}


def csprng_standard_normal(n: int) -> NDArray[np.float64]:
    """``n`` N(0, 1) draws, each the scaled sum of four Box–Muller normals."""
    u = csprng_uniforms(4 * n).reshape(2, 2 * n)
    radius = np.sqrt(-2.0 * np.log(u[0]))
    angle = 2.0 * math.pi * u[1]
    z = np.concatenate([radius * np.cos(angle), radius * np.sin(angle)])
    out: NDArray[np.float64] = z.reshape(4, n).sum(axis=0) / 2.0
    return out


def csprng_gaussian(
    shape: torch.Size | tuple[int, ...], std: float, device: torch.device, dtype: torch.dtype
) -> torch.Tensor:
    """A tensor of N(0, std²) noise from the OS CSPRNG."""
    n = math.prod(shape)
    z = torch.from_numpy(csprng_standard_normal(n)).reshape(shape) * std
    return z.to(device=device, dtype=dtype)


def csprng_coins(n: int, q: float) -> torch.Tensor:
    """Poisson sampling: which of ``n`` units a step keeps, each with probability q."""
    return torch.from_numpy(PrivacyRandomness().bernoulli(n, q))


def poisson_coins(n: int, q: float, generator: torch.Generator | None) -> torch.Tensor:
    """A step's Poisson coins: from ``generator``, or from the OS CSPRNG when it is None
    (secure mode)."""
    if generator is None:
        return csprng_coins(n, q)
    return torch.rand(n, generator=generator) < q


def install_csprng_noise(optimizer: Any) -> None:
    """Make an Opacus ``DPOptimizer`` add CSPRNG noise: its ``add_noise`` step, with the
    noise drawn by :func:`csprng_gaussian` instead of a torch generator."""
    from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

    def add_noise() -> None:
        std = optimizer.noise_multiplier * optimizer.max_grad_norm
        for p in optimizer.params:
            _check_processed_flag(p.summed_grad)
            g = p.summed_grad
            p.grad = (g + csprng_gaussian(g.shape, std, g.device, g.dtype)).view_as(p)
            _mark_as_processed(p.summed_grad)

    optimizer.add_noise = add_noise
