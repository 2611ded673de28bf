"""Word-level mechanisms: clip a word vector to norm C, add noise, map to the nearest word.

- :class:`LaplaceWordMechanism`: metric DP (Feyisetan et al. 2020, §2.2). Noise with density
  ∝ exp(−ε_m‖z‖): a uniform direction times a radius drawn from Gamma(d, 1/ε_m). For any two
  words w, w′ the output distributions satisfy ε_m·‖φ(w) − φ(w′)‖-DP; after clipping every
  distance is at most 2C, so each word is (2Cε_m, 0)-DP. The user gives that worst-case
  ε per word; ε_m = ε / (2C).
- :class:`GaussianWordMechanism`: the Gaussian mechanism with ℓ₂ sensitivity Δ = 2C and σ
  from (ε, δ) by the analytic calibration (Balle & Wang 2018).

Per document of n words (any words may change): Laplace composes to (nε, 0); the Gaussian
noise on n words is one Gaussian mechanism on the concatenated vectors with sensitivity
Δ√n, whose exact ε at δ is reported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from privlm.errors import PrivlmError
from privlm.perturb.gaussian_calibration import (
    check_epsilon_delta,
    gaussian_epsilon,
    gaussian_sigma,
)
from privlm.perturb.uniforms import gamma_integer_shape, standard_normals

DEFAULT_CLIP = 5.0  # about the median norm of GloVe 50d vectors


def clip_rows(vectors: NDArray[Any], clip: float) -> NDArray[np.float64]:
    """Each row scaled to ℓ₂ norm at most ``clip``."""
    v = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(v, axis=-1, keepdims=True)
    scale = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
    out: NDArray[np.float64] = v * scale
    return out


class WordMechanism(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def clip(self) -> float: ...

    def uniforms_per_word(self, dim: int) -> int: ...

    def noise(self, u: NDArray[np.float64], dim: int) -> NDArray[np.float64]: ...

    def word_guarantee(self) -> dict[str, Any]: ...

    def document_guarantee(self, words: int) -> dict[str, Any]: ...


def _check_clip(clip: float) -> None:
    if not (math.isfinite(clip) and clip > 0):
        raise PrivlmError(f"the clipping norm C must be positive, not {clip!r}")


@dataclass(frozen=True)
class LaplaceWordMechanism:
    """Metric-DP multivariate Laplace noise; ``epsilon`` is the worst-case ε per word."""

    epsilon: float
    clip: float = DEFAULT_CLIP
    name: str = field(default="laplace", init=False)

    def __post_init__(self) -> None:
        if not (math.isfinite(self.epsilon) and self.epsilon > 0):
            raise PrivlmError(f"ε must be a positive finite number, not {self.epsilon!r}")
        _check_clip(self.clip)

    @property
    def metric_epsilon(self) -> float:
        """ε_m of the metric-DP guarantee, per unit of Euclidean distance."""
        return self.epsilon / (2.0 * self.clip)

    def uniforms_per_word(self, dim: int) -> int:
        return 2 * dim  # dim for the direction (Box–Muller), dim for the Gamma radius

    def noise(self, u: NDArray[np.float64], dim: int) -> NDArray[np.float64]:
        g = standard_normals(u[:dim])
        direction = g / np.linalg.norm(g)
        radius = gamma_integer_shape(u[dim : 2 * dim], 1.0 / self.metric_epsilon)
        out: NDArray[np.float64] = radius * direction
        return out

    def word_guarantee(self) -> dict[str, Any]:
        return {
            "mechanism": "metric-DP multivariate Laplace (Feyisetan et al. 2020)",
            "metric_epsilon": self.metric_epsilon,
            "epsilon": self.epsilon,
            "delta": 0.0,
            "clip": self.clip,
        }

    def document_guarantee(self, words: int) -> dict[str, Any]:
        return {"epsilon": words * self.epsilon, "delta": 0.0, "words": words}


@dataclass(frozen=True)
class GaussianWordMechanism:
    """The Gaussian mechanism on clipped word vectors, σ calibrated to (ε, δ) per word."""

    epsilon: float
    delta: float
    clip: float = DEFAULT_CLIP
    name: str = field(default="gaussian", init=False)

    def __post_init__(self) -> None:
        check_epsilon_delta(self.epsilon, self.delta)
        _check_clip(self.clip)

    @property
    def sensitivity(self) -> float:
        return 2.0 * self.clip

    @cached_property
    def sigma(self) -> float:
        return gaussian_sigma(self.epsilon, self.delta, self.sensitivity)

    def uniforms_per_word(self, dim: int) -> int:
        return dim + dim % 2

    def noise(self, u: NDArray[np.float64], dim: int) -> NDArray[np.float64]:
        out: NDArray[np.float64] = (
            self.sigma * standard_normals(u[: self.uniforms_per_word(dim)])[:dim]
        )
        return out

    def word_guarantee(self) -> dict[str, Any]:
        return {
            "mechanism": "Gaussian (analytic calibration, Balle & Wang 2018)",
            "epsilon": self.epsilon,
            "delta": self.delta,
            "sigma": self.sigma,
            "clip": self.clip,
        }

    def document_guarantee(self, words: int) -> dict[str, Any]:
        if words == 0:
            return {"epsilon": 0.0, "delta": 0.0, "words": 0}
        eps = gaussian_epsilon(self.sigma, self.sensitivity * math.sqrt(words), self.delta)
        return {"epsilon": eps, "delta": self.delta, "words": words}


def make_mechanism(
    name: str, epsilon: float, delta: float | None = None, clip: float = DEFAULT_CLIP
) -> WordMechanism:
    """``laplace`` (ε per word) or ``gaussian`` (ε, δ per word)."""
    if name == "laplace":
        return LaplaceWordMechanism(epsilon, clip)
    if name == "gaussian":
        if delta is None:
            raise PrivlmError("the Gaussian mechanism needs δ")
        return GaussianWordMechanism(epsilon, delta, clip)
    raise PrivlmError(f"unknown mechanism {name!r}; choose laplace or gaussian")
