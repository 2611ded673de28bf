"""The mixing weights λ of PMixED (Eq. 5) and SubMix (Eq. 2), by vectorised bisection.

Both are the largest λ ∈ [0, 1] keeping a divergence of mixtures within a radius. The
divergence is non-decreasing in λ: the pair at λ₁ < λ₂ is a convex combination of the pair
at λ₂ and the pair at 0 (divergence 0), and Rényi divergence is jointly quasi-convex. So
bisection applies, all rows at once, to ``LAMBDA_TOL``. The result is the lower end of the
final bracket, which satisfies the constraint: rounding is always toward privacy.

The bisection works in probability space on the likelihood ratios r = p/p₀, computed once:
the mixture is p₀·t with t = 1 + λ(r − 1), so D_α(mix ‖ p₀) = log Σ p₀ t^α / (α − 1) and
D_α(p₀ ‖ mix) = log Σ p₀ t^{1−α} / (α − 1): one fused update and two power sums per
iteration, in float64. An overflow can only make a constraint look violated, which lowers λ.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

LAMBDA_TOL = 1e-4  # the returned λ is within this of the largest feasible λ, and below it


ROW_CHUNK = 2  # rows solved together: keeps the float64 working set in cache


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


def _pow(t: torch.Tensor, power: float) -> torch.Tensor:
    """t**power; integer powers by repeated squaring (much faster than the float path)."""
    k = int(power)
    if k != power or abs(k) > 64:
        return torch.pow(t, power)
    base, n = (t, k) if k >= 0 else (torch.reciprocal(t), -k)
    result = torch.ones_like(t)
    while n:
        if n & 1:
            result = result * base
        n >>= 1
        if n:
            base = base * base
    return result


def _log_power_sum(p0: torch.Tensor, t: torch.Tensor, power: float) -> torch.Tensor:
    return torch.log((p0 * _pow(t, power)).sum(dim=-1))


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
    if log_p.shape[0] > ROW_CHUNK:
        x0_all = log_p0.expand(log_p.shape[0], -1)
        return torch.cat(
            [
                pmixed_lambdas(
                    log_p[i : i + ROW_CHUNK], x0_all[i : i + ROW_CHUNK], order, radius, tol
                )
                for i in range(0, log_p.shape[0], ROW_CHUNK)
            ]
        )
    x0 = log_p0.double().expand(log_p.shape[0], -1)
    p0 = x0.exp()
    r_minus_1 = torch.exp(log_p.double() - x0) - 1.0
    limit = radius * (order - 1.0)

    def ok(lam: torch.Tensor) -> torch.Tensor:
        t = torch.addcmul(torch.ones_like(r_minus_1), lam.unsqueeze(-1), r_minus_1)
        forward = _log_power_sum(p0, t, order)
        reverse = _log_power_sum(p0, t, 1.0 - order)
        return (torch.nan_to_num(forward, nan=torch.inf) <= limit) & (
            torch.nan_to_num(reverse, nan=torch.inf) <= limit
        )

    return _bisect(ok, log_p.shape[0], tol)


def submix_lambdas(
    log_h: torch.Tensor,
    log_h_prime: torch.Tensor,
    log_h0: torch.Tensor,
    alpha: float,
    beta: float,
    tol: float = LAMBDA_TOL,
) -> torch.Tensor:
    """Eq. 2: λ_i = max{λ : D_α(λ h_πi + (1 − λ) h₀ ‖ λ h_π'i + (1 − λ) h₀) ≤ β}, per part."""
    if log_h.shape[0] > ROW_CHUNK:
        x0_all = log_h0.expand(log_h.shape[0], -1)
        return torch.cat(
            [
                submix_lambdas(
                    log_h[i : i + ROW_CHUNK],
                    log_h_prime[i : i + ROW_CHUNK],
                    x0_all[i : i + ROW_CHUNK],
                    alpha,
                    beta,
                    tol,
                )
                for i in range(0, log_h.shape[0], ROW_CHUNK)
            ]
        )
    x0 = log_h0.double().expand(log_h.shape[0], -1)
    p0 = x0.exp()
    ra = torch.exp(log_h.double() - x0) - 1.0
    rb = torch.exp(log_h_prime.double() - x0) - 1.0
    limit = beta * (alpha - 1.0)

    def ok(lam: torch.Tensor) -> torch.Tensor:
        one = torch.ones_like(ra)
        ta = torch.addcmul(one, lam.unsqueeze(-1), ra)
        tb = torch.addcmul(one, lam.unsqueeze(-1), rb)
        s = torch.log((p0 * _pow(ta, alpha) * _pow(tb, 1.0 - alpha)).sum(dim=-1))
        return torch.nan_to_num(s, nan=torch.inf) <= limit

    return _bisect(ok, log_h.shape[0], tol)
