"""The mixing weights λ of PMixED (Eq. 5) and SubMix (Eq. 2), by vectorised bisection.

Both are the largest λ ∈ [0, 1] keeping a divergence of mixtures within a radius. The
divergence is non-decreasing in λ: the pair at λ₁ < λ₂ is a convex combination of the pair
at λ₂ and the pair at 0 (divergence 0), and Rényi divergence is jointly quasi-convex. So
bisection applies, all rows at once, to ``LAMBDA_TOL``. The result is the lower end of the
final bracket, which satisfies the constraint: rounding is always toward privacy.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from privlm.predict.divergence import log_mix, renyi_divergence, symmetric_renyi

LAMBDA_TOL = 1e-6


def _bisect(
    constraint: Callable[[torch.Tensor], torch.Tensor], rows: int, tol: float
) -> torch.Tensor:
    lo = torch.zeros(rows, dtype=torch.float64)
    hi = torch.ones(rows, dtype=torch.float64)
    ok_at_one = constraint(hi)
    while float((hi - lo).max()) > tol:
        mid = 0.5 * (lo + hi)
        ok = constraint(mid)
        lo = torch.where(ok, mid, lo)
        hi = torch.where(ok, hi, mid)
    return torch.where(ok_at_one, torch.ones_like(lo), lo)


def pmixed_lambdas(
    log_p: torch.Tensor,
    log_p0: torch.Tensor,
    order: float,
    radius: float,
    tol: float = LAMBDA_TOL,
) -> torch.Tensor:
    """Eq. 5: λ_i = max{λ : D↔_order(λ p_i + (1 − λ) p₀ ‖ p₀) ≤ radius}, per row of ``log_p``.

    ``log_p``: (m, V) log-probabilities of the sampled models; ``log_p0``: (V,) or (m, V).
    privlm calls it with order 2α (see :mod:`privlm.accounting.analysis.pmixed`).
    """
    x = log_p.double()
    x0 = log_p0.double().expand_as(x)

    def ok(lam: torch.Tensor) -> torch.Tensor:
        return symmetric_renyi(log_mix(lam, x, x0), x0, order) <= radius

    return _bisect(ok, x.shape[0], tol)


def submix_lambdas(
    log_h: torch.Tensor,
    log_h_prime: torch.Tensor,
    log_h0: torch.Tensor,
    alpha: float,
    beta: float,
    tol: float = LAMBDA_TOL,
) -> torch.Tensor:
    """Eq. 2: λ_i = max{λ : D_α(λ h_πi + (1 − λ) h₀ ‖ λ h_π'i + (1 − λ) h₀) ≤ β}, per part."""
    a, b = log_h.double(), log_h_prime.double()
    x0 = log_h0.double().expand_as(a)

    def ok(lam: torch.Tensor) -> torch.Tensor:
        return renyi_divergence(log_mix(lam, a, x0), log_mix(lam, b, x0), alpha) <= beta

    return _bisect(ok, a.shape[0], tol)
