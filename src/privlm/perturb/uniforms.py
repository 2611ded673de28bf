"""Uniform variates and the transforms both implementations apply to them.

The browser draws 32-bit words from ``crypto.getRandomValues``; Python draws them from
``os.urandom`` (or a seeded generator, for tests). A word u becomes (u + ½)/2³², which lies
strictly inside (0, 1), so logarithms are always finite. Everything random downstream is a
fixed function of these uniforms, which is what lets Python and JavaScript share test vectors.
"""

from __future__ import annotations

import math
import os

import numpy as np
from numpy.typing import NDArray

TWO_32 = 4294967296.0


class UniformSource:
    """Uniforms in (0, 1) from a CSPRNG (``os.urandom``), or from a seed (tests only)."""

    def __init__(self, seed: int | None = None) -> None:
        self._rng = None if seed is None else np.random.default_rng(seed)

    def words(self, n: int) -> NDArray[np.uint32]:
        if self._rng is not None:
            return self._rng.integers(0, 2**32, size=n, dtype=np.uint32)
        return np.frombuffer(os.urandom(4 * n), dtype="<u4").copy()

    def __call__(self, n: int) -> NDArray[np.float64]:
        return uniforms_from_words(self.words(n))


def uniforms_from_words(words: NDArray[np.uint32]) -> NDArray[np.float64]:
    return (np.asarray(words, dtype=np.float64) + 0.5) / TWO_32


def standard_normals(u: NDArray[np.float64]) -> NDArray[np.float64]:
    """Box–Muller: uniforms (u₁, u₂, u₃, u₄, …) → normals, one per uniform (pairs give the
    cosine and sine branches). ``len(u)`` must be even."""
    u = np.asarray(u, dtype=np.float64)
    if len(u) % 2:
        raise ValueError("Box–Muller needs an even number of uniforms")
    r = np.sqrt(-2.0 * np.log(u[0::2]))
    theta = 2.0 * math.pi * u[1::2]
    out = np.empty(len(u))
    out[0::2] = r * np.cos(theta)
    out[1::2] = r * np.sin(theta)
    return out


def gamma_integer_shape(u: NDArray[np.float64], scale: float) -> float:
    """Gamma(k, scale) for integer k = len(u): a sum of k exponentials, −scale·Σ log uᵢ."""
    return float(-scale * np.sum(np.log(np.asarray(u, dtype=np.float64))))
