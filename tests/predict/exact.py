"""Brute-force reference computations for the exact-divergence tests (numpy / mpmath)."""

from __future__ import annotations

import itertools
import math

import mpmath
import numpy as np
import torch

from privlm.predict.pmixed_rule import pmixed_mixture
from privlm.predict.submix_rule import submix_step

mpmath.mp.dps = 40


def renyi(p, q, alpha) -> float:
    """D_α(P ‖ Q) in 40-digit arithmetic."""
    s = mpmath.fsum(
        mpmath.mpf(float(x)) ** alpha * mpmath.mpf(float(y)) ** (1 - alpha)
        for x, y in zip(p, q, strict=True)
        if x > 0
    )
    return float(mpmath.log(s) / (alpha - 1))


def sym(p, q, alpha) -> float:
    return max(renyi(p, q, alpha), renyi(q, p, alpha))


def random_pmf(rng, v, concentration):
    p = rng.dirichlet(np.full(v, concentration))
    p = np.maximum(p, 1e-12)
    return p / p.sum()


def _integer_power(t: np.ndarray, k: int) -> np.ndarray:
    """t**k by repeated squaring, the multiplications in privlm's order (bit for bit)."""
    out, base = None, t
    while k:
        if k & 1:
            out = base if out is None else out * base
        k >>= 1
        if k:
            base = base * base
    return out


def ball_lambdas(models, p0, order, radius, tol=1e-13, cap=1.0) -> np.ndarray:
    """Eq. 5 of the PMixED paper in numpy, for the adversarial searches (a search evaluates
    it tens of thousands of times; privlm's torch solver pays a launch per operation).

    The same definition as privlm's: the largest λ ∈ [0, 1] with both Rényi divergences of
    order ``order`` between λp + (1 − λ)p₀ and p₀ at most ``radius`` (less a relative margin
    of 1e-12 on the power sums), from below, by a bisection of ⌈log₂(1/tol)⌉ halvings; then
    capped. Checked equal to privlm's pmixed_lambdas in test_pmixed_per_unit."""
    r = np.asarray(models, dtype=np.float64) / p0
    bound = math.exp(radius * (order - 1.0)) * (1.0 - 1e-12)
    k = int(order)
    assert k == order and 1 <= k <= 64, "integer orders only (privlm calls it with 2α)"

    def inside(lam: np.ndarray) -> np.ndarray:
        t = (1.0 - lam)[:, None] + lam[:, None] * r
        t_m = _integer_power(t, k)
        forward, reverse = t_m @ p0, (t / t_m) @ p0
        return (forward <= bound) & (reverse <= bound)  # False for NaN

    lo, hi = np.zeros(len(r)), np.ones(len(r))
    with np.errstate(all="ignore"):  # an overflow can only reject, as in privlm
        ok_at_one = inside(hi)
        for _ in range(math.ceil(math.log2(1.0 / tol))):
            mid = 0.5 * (lo + hi)
            ok = inside(mid)
            lo, hi = np.where(ok, mid, lo), np.where(ok, hi, mid)
    return np.minimum(np.where(ok_at_one, 1.0, lo), cap)


def pmixed_output(models, p0, alpha, radius, lambda_cap=1.0):
    """The released pmf for a fixed set of models (no subsampling)."""
    lp = torch.log(torch.from_numpy(np.array(models))) if models else torch.zeros(0, len(p0))
    mix = pmixed_mixture(
        lp, torch.log(torch.from_numpy(p0)), alpha, radius, tol=1e-13, lambda_cap=lambda_cap
    )
    return mix.log_probs.exp().numpy()


def pmixed_poisson_output(models, p0, alpha, radius, q, lambda_cap=1.0):
    """Exact output pmf over the Poisson subsampling randomness: enumerate every subset."""
    n = len(models)
    total = np.zeros(len(p0))
    for r in range(n + 1):
        for subset in itertools.combinations(range(n), r):
            weight = q**r * (1 - q) ** (n - r)
            chosen = [models[j] for j in subset]
            total += weight * pmixed_output(chosen, p0, alpha, radius, lambda_cap)
    return total


def pmixed_with_replacement_output(models, p0, alpha, radius, q):
    """What the buggy reference does: round(qN) draws *with replacement*, every multiset."""
    n = len(models)
    draws = max(1, round(q * n))
    total = np.zeros(len(p0))
    for seq in itertools.product(range(n), repeat=draws):
        total += pmixed_output([models[j] for j in seq], p0, alpha, radius) / n**draws
    return total


def submix_output(pairs, h0, alpha, beta):
    """The released pmf of SubMix for the given parts (each a pair of subpart pmfs)."""
    if not pairs:
        return h0
    a = torch.log(torch.from_numpy(np.array([p for p, _ in pairs])))
    b = torch.log(torch.from_numpy(np.array([p for _, p in pairs])))
    return (
        submix_step(a, b, torch.log(torch.from_numpy(h0)), alpha, beta, tol=1e-13)
        .log_probs.exp()
        .numpy()
    )


def rows(x):
    return [float(v) for v in x]


__all__ = [
    "ball_lambdas",
    "math",
    "pmixed_output",
    "pmixed_poisson_output",
    "pmixed_with_replacement_output",
    "random_pmf",
    "renyi",
    "rows",
    "submix_output",
    "sym",
]
