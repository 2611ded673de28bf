"""The mixing weights λ of PMixED (Eq. 5) and SubMix (Eq. 2), by vectorised bisection.

Both are the largest λ ∈ [0, 1] keeping a divergence of mixtures within a radius. The
divergence is non-decreasing in λ: the pair at λ₁ < λ₂ is a convex combination of the pair
at λ₂ and the pair at 0 (divergence 0), and Rényi divergence is jointly quasi-convex. So
bisection applies, all rows at once, to ``LAMBDA_TOL``. The result is the lower end of the
final bracket, which satisfies the constraint: rounding is always toward privacy.

**In float64, without cancellation.** The bisection works in probability space on the
likelihood ratios r = p/p₀, computed once: the mixture is p₀·t with t = (1 − λ) + λ·r, so
D_M(mix ‖ p₀) = log Σ p₀ t^M / (M − 1) and D_M(p₀ ‖ mix) = log Σ p₀ t^{1−M} / (M − 1). t is a
sum of two non-negative terms, each exact to a rounding: written as 1 + λ(r − 1), it loses r
when r is tiny and λ near 1, and a member could then be accepted just outside the ball
(docs/sharp_edges.md, "What must stay secret beside the output"). An overflow, an underflow
or a NaN can only make a constraint look violated, which lowers λ; the power sums are
compared with the radius less a relative margin that covers their rounding error for
the vocabulary's size (:func:`ball_margin`: at least ``BALL_MARGIN``).

**On the CPU with many members** the same bisection runs fused, one pass over the vocabulary
per step (:mod:`privlm.predict.ball_kernel`, compiled by numba): the same λ to rounding.

**The same work for every input.** The number of bisection steps is fixed by the tolerance
alone (every row's bracket halves at every step), and every step does the same arithmetic
on every row, so the time to solve does not depend on which rows a caller later uses. PMixED
solves all N members at every query for that reason (:mod:`privlm.predict.pmixed_rule`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from privlm.predict import ball_kernel

LAMBDA_TOL = 1e-4  # the returned λ is within this of the largest feasible λ, and below it
BALL_MARGIN = 1e-12  # relative: exp(radius·(M − 1)) is enforced as exp(…)·(1 − margin), at least
UNIT_ROUNDOFF = 2.0**-53  # float64's
ROW_CHUNK = 8  # rows solved together: keeps the float64 working set in the CPU's cache


def bisection_steps(tol: float) -> int:
    """How many halvings take the bracket [0, 1] below ``tol``: the same for every input."""
    if not 0.0 < tol < 1.0:
        raise ValueError(f"the λ tolerance must lie in (0, 1), got {tol!r}")
    return math.ceil(math.log2(1.0 / tol))


def _bisect(
    constraint: Callable[[torch.Tensor], torch.Tensor],
    rows: int,
    tol: float,
    device: torch.device,
) -> torch.Tensor:
    """The largest λ in [0, 1] (within ``tol``, from below) that ``constraint`` accepts, per
    row; the bracket lives on the device of the distributions it is tested against."""
    lo = torch.zeros(rows, dtype=torch.float64, device=device)
    hi = torch.ones(rows, dtype=torch.float64, device=device)
    ok_at_one = constraint(hi)
    for _ in range(bisection_steps(tol)):
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


def _power_into(t: torch.Tensor, power: float, out: torch.Tensor, scratch: torch.Tensor) -> None:
    """``out`` = t**power for power ≥ 1, reusing ``scratch``: integer powers by repeated
    squaring in place (no allocation inside the bisection)."""
    k = int(power)
    if k != power or k > 64 or k < 1:
        torch.pow(t, power, out=out)
        return
    base: torch.Tensor = t
    started = False
    while k:
        if k & 1:
            if started:
                out.mul_(base)
            else:
                out.copy_(base)
                started = True
        k >>= 1
        if k:
            if base is t:
                torch.mul(t, t, out=scratch)
                base = scratch
            else:
                scratch.mul_(scratch)


def _weighted_sum(x: torch.Tensor, p0: torch.Tensor) -> torch.Tensor:
    """Σ_v p₀(v)·x(·, v) per row, for p₀ of shape (V,) (one matrix-vector product) or (m, V)."""
    return x @ p0 if p0.dim() == 1 else (x * p0).sum(dim=-1)


def ball_margin(vocab: int) -> float:
    """The relative margin under exp(radius·(M − 1)) for power sums over ``vocab`` tokens.

    Each sum adds ``vocab`` non-negative float64 terms, so in any order of addition its
    computed value is within a relative (vocab − 1)·u of the exact sum of the computed terms
    (u = 2⁻⁵³). Each term carries an error of its own, about (M·(|log p| + |log p₀|) + 10)·u
    (the ratio is the exponential of a difference of log-probabilities, then the power and the
    product): under 4,096·u for orders M ≤ 16 and log-probabilities above −100 (the range of a
    float32 softmax). 4·(vocab + 1024)·u covers both: 1.1e-11 at SmolLM2's 49,152 tokens,
    never less than ``BALL_MARGIN``."""
    return max(BALL_MARGIN, 4.0 * (vocab + 1024) * UNIT_ROUNDOFF)


def ball_bound(order: float, radius: float, vocab: int) -> float:
    """What Σ p₀ t^M and Σ p₀ t^{1−M} over ``vocab`` tokens are compared with:
    exp(radius·(M − 1)) less the margin (:func:`ball_margin`)."""
    return math.exp(radius * (order - 1.0)) * (1.0 - ball_margin(vocab))


def _ball_lambdas(
    r: torch.Tensor, p0: torch.Tensor, order: float, radius: float, tol: float
) -> torch.Tensor:
    """Eq. 5 on the likelihood ratios ``r`` (m, V) against ``p0``: see the module docstring."""
    bound = ball_bound(order, radius, r.shape[-1])
    t, t_m, scratch = torch.empty_like(r), torch.empty_like(r), torch.empty_like(r)

    def inside(lam: torch.Tensor) -> torch.Tensor:
        torch.addcmul((1.0 - lam).unsqueeze(-1), lam.unsqueeze(-1), r, out=t)
        _power_into(t, order, t_m, scratch)
        forward = _weighted_sum(t_m, p0)  # Σ p₀ t^M
        torch.div(t, t_m, out=scratch)  # t^{1−M}
        reverse = _weighted_sum(scratch, p0)
        return (forward <= bound) & (reverse <= bound)  # False for NaN

    return _bisect(inside, r.shape[0], tol, r.device)


def likelihood_ratios(log_p: torch.Tensor, log_p0: torch.Tensor) -> torch.Tensor:
    """r = p/p₀ per row, in float64."""
    return torch.exp(log_p.double() - log_p0.double())


def pmixed_lambdas(
    log_p: torch.Tensor,
    log_p0: torch.Tensor,
    order: float,
    radius: float,
    tol: float = LAMBDA_TOL,
) -> torch.Tensor:
    """Eq. 5: λ_i = max{λ : D↔_order(λ p_i + (1 − λ) p₀ ‖ p₀) ≤ radius}, per row of ``log_p``.

    ``log_p``: (m, V) log-probabilities of the models; ``log_p0``: (V,) or (m, V).
    privlm calls it with order 2α (see :mod:`privlm.accounting.analysis.pmixed`).
    """
    x0 = log_p0.double()
    p0 = x0.exp()
    if ball_kernel.applies(log_p, order):  # many rows on the CPU: one fused pass per step
        bound, steps = ball_bound(order, radius, log_p.shape[-1]), bisection_steps(tol)
        return ball_kernel.fused_ball_lambdas(log_p, x0, p0, order, bound, steps)
    chunks = []
    # On a GPU every row at once (one launch per bisection step); on the CPU a few rows at a
    # time, to keep the float64 working set in cache.
    step = ROW_CHUNK if log_p.device.type == "cpu" else max(1, log_p.shape[0])
    for i in range(0, log_p.shape[0], step):
        rows = slice(i, i + step)
        x0_rows, p0_rows = (x0, p0) if x0.dim() == 1 else (x0[rows], p0[rows])
        r = likelihood_ratios(log_p[rows], x0_rows)
        chunks.append(_ball_lambdas(r, p0_rows, order, radius, tol))
    return torch.cat(chunks) if chunks else torch.zeros(0, dtype=torch.float64, device=log_p.device)


def submix_lambdas(
    log_h: torch.Tensor,
    log_h_prime: torch.Tensor,
    log_h0: torch.Tensor,
    alpha: float,
    beta: float,
    tol: float = LAMBDA_TOL,
) -> torch.Tensor:
    """Eq. 2: λ_i = max{λ : D_α(λ h_πi + (1 − λ) h₀ ‖ λ h_π'i + (1 − λ) h₀) ≤ β}, per part."""
    if log_h.shape[0] > 2:
        x0_all = log_h0.expand(log_h.shape[0], -1)
        return torch.cat(
            [
                submix_lambdas(
                    log_h[i : i + 2], log_h_prime[i : i + 2], x0_all[i : i + 2], alpha, beta, tol
                )
                for i in range(0, log_h.shape[0], 2)
            ]
        )
    x0 = log_h0.double().expand(log_h.shape[0], -1)
    p0 = x0.exp()
    ra = likelihood_ratios(log_h, x0)
    rb = likelihood_ratios(log_h_prime, x0)
    limit = beta * (alpha - 1.0)

    def ok(lam: torch.Tensor) -> torch.Tensor:
        keep, lam_ = (1.0 - lam).unsqueeze(-1), lam.unsqueeze(-1)
        ta = torch.addcmul(keep, lam_, ra)  # (1 − λ) + λ r: no cancellation
        tb = torch.addcmul(keep, lam_, rb)
        s = torch.log((p0 * _pow(ta, alpha) * _pow(tb, 1.0 - alpha)).sum(dim=-1))
        return torch.nan_to_num(s, nan=torch.inf) <= limit

    return _bisect(ok, log_h.shape[0], tol, ra.device)
