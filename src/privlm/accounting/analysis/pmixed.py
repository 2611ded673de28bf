"""PMixED's per-query privacy loss, and the RD-ball radius that meets a per-query budget.

The PMixED paper (``shared/papers/000``) mollifies each model p_i toward the public model p₀
inside a Rényi-divergence ball (Eq. 5), bounds the loss of the averaged output (Theorem 5.1)
and amplifies it by Poisson subsampling (§5.2, Theorem C.4 / Eq. 12).

**Where privlm departs from the paper, and why.** Theorem 5.1's proof applies a
"triangle-like inequality" (Theorem C.5) at the single order α. That inequality holds when
the divergence bounds hold at *every* order (as in zCDP), not at one order: privlm's tests
exhibit two models inside the paper's order-α ball whose average moves ~10× the per-query
budget when one is removed. privlm therefore uses the weak triangle inequality of
Mironov 2017 (Proposition 11 with p = q = 2)::

    D_k(P ‖ Q) ≤ (k − ½)/(k − 1) · D_{2k}(P ‖ R) + D_{2k−1}(R ‖ Q)

with R = p₀. If every mollified model satisfies D↔_{2α}(p̄_j ‖ p₀) ≤ ρ (the ball at order
2α, radius ρ), then for every integer k ≤ α and in both directions::

    D_k(p̄_i ‖ p̄_{−i}) ≤ d(k) = ((k − ½)/(k − 1) + 1) · ρ

(the order-(2k−1) and 2k terms are bounded by ρ since Rényi divergence grows with the order
and is jointly quasi-convex).

**From one model to a subset of m (issue 15 §1).** With Q the average of the other m − 1
mollified models and R = p̄_i, the subset's output is the two-point mixture
P = (1 − 1/m)·Q + (1/m)·R, and D_ℓ(R ‖ Q), D_ℓ(Q ‖ R) ≤ d(ℓ) for every integer ℓ ≤ α.
That is Theorem C.4 (Steinke 2022) on a one-element input: let M(⊥) = Q and M(x₁) = R, which
is (ℓ, d(ℓ))-RDP under add/remove for ℓ ≤ α (and (ℓ, ∞) above, which Eq. 12 at order k ≤ α
never reads); keeping x₁ with probability 1/m gives M^U(x₁) = P and M^U(⊥) = Q. So, in both
directions, the *expansion* bound::

    ε_m(k) = ε'_{1/m}(k) of Eq. 12 with base curve d(2), …, d(k),      ε_1(k) = ρ

It expands the mixture's Rényi moment exactly (binomially) and bounds each moment at its own
order, where Jensen's step of Theorem 5.1 (Eq. 7–8) bounds them all by the order-k one::

    ε_m(k) ≤ log((m − 1)/m + e^{(k−1)·d(k)}/m) / (k − 1)          (``bound="jensen"``)

(the reverse direction has the same Jensen bound, by convexity of x^{1−k}). At the paper's
defaults (ε = 8, δ = 1e-5, T = 1024, q = 0.03, N = 80, α = 3) the expansion allows
ρ* = 0.925 where Jensen allows 0.687; no rule on the order-2α ball can pass 1.191, where a
subset of one model (ε_1 = ρ) alone uses the budget. ``bound="jensen"`` stays available to
compare. The radius does not depend on the realised subset size: a size-dependent radius
changes the other models' weights between neighbouring inputs, which Theorem C.4 does not
cover. So the mechanism's loss is ε(k) = max over the subset sizes it can meet, and Eq. 12
amplifies that (Theorem C.4 again, over the Poisson subset of models).
"""

from __future__ import annotations

import math

import numpy as np

from privlm.accounting.analysis.poisson_amplification import poisson_subsampled_rdp
from privlm.errors import AccountingError


def check_alpha(alpha: float) -> int:
    """PMixED's order α must be an integer ≥ 2 (Eq. 12 needs integer orders)."""
    if alpha != int(alpha) or alpha < 2:
        raise AccountingError(f"PMixED's order α must be an integer ≥ 2, got {alpha!r}")
    return int(alpha)


def ball_order(alpha: float) -> float:
    """The order at which the RD ball is enforced: 2α (see the module docstring)."""
    return 2.0 * check_alpha(alpha)


def pairwise_bound(radius: float, order: int) -> float:
    """d(k): bound on D_k between one mollified model and an average of others."""
    k = float(order)
    return ((k - 0.5) / (k - 1.0) + 1.0) * radius


BOUNDS = ("expansion", "jensen")
DEFAULT_BOUND = "expansion"


def check_bound(bound: str) -> str:
    if bound not in BOUNDS:
        raise AccountingError(f"unknown PMixED bound {bound!r}; choose from {BOUNDS}")
    return bound


def subset_rdp(radius: float, order: int, subset_size: int, bound: str = DEFAULT_BOUND) -> float:
    """ε_m(k): RDP at order k of averaging m mollified models, one added or removed (module
    docstring: Eq. 12 at rate 1/m on d(2..k), or Jensen's step of Theorem 5.1)."""
    k, m = int(order), int(subset_size)
    if m <= 1:
        return float(radius)
    if check_bound(bound) == "expansion":
        base = [pairwise_bound(radius, ell) for ell in range(2, k + 1)]
        return float(poisson_subsampled_rdp(base, 1.0 / m, [k])[0])
    x = (k - 1) * pairwise_bound(radius, k)
    # log((m-1)/m + e^x/m), stably
    return float((np.logaddexp(math.log(m - 1), x) - math.log(m)) / (k - 1))


def mechanism_rdp(
    radius: float, order: int, n_models: int, sample_rate: float, bound: str = DEFAULT_BOUND
) -> float:
    """ε(k) of the (unsubsampled) mixture over every subset size it may meet."""
    if n_models < 1:
        raise AccountingError("PMixED needs at least one model")
    sizes = [n_models] if sample_rate >= 1.0 else range(1, n_models + 1)
    return max(subset_rdp(radius, order, m, bound) for m in sizes)


def query_rdp_curve(
    radius: float, alpha: float, n_models: int, sample_rate: float, bound: str = DEFAULT_BOUND
) -> dict[float, float]:
    """Per-query RDP at integer orders 2..α after Poisson subsampling (Eq. 12)."""
    a = check_alpha(alpha)
    base = [mechanism_rdp(radius, k, n_models, sample_rate, bound) for k in range(2, a + 1)]
    orders = list(range(2, a + 1))
    amplified = poisson_subsampled_rdp(base, min(sample_rate, 1.0), orders)
    return {float(k): float(v) for k, v in zip(orders, amplified, strict=True)}


def query_rdp(
    radius: float, alpha: float, n_models: int, sample_rate: float, bound: str = DEFAULT_BOUND
) -> float:
    """ε'_q(α): the per-query RDP at order α."""
    curve = query_rdp_curve(radius, alpha, n_models, sample_rate, bound)
    return curve[float(check_alpha(alpha))]


def solve_radius(
    epsilon_per_query: float,
    alpha: float,
    n_models: int,
    sample_rate: float,
    rel_tol: float = 1e-10,
    bound: str = DEFAULT_BOUND,
) -> float:
    """ρ* = max{ρ : ε'_q(α; ρ) ≤ ε_G/T} (the §5.2 rule, on the sound bound), rounded down."""
    check_alpha(alpha)
    check_bound(bound)
    if not (epsilon_per_query > 0 and math.isfinite(epsilon_per_query)):
        raise AccountingError(f"the per-query budget must be positive, got {epsilon_per_query!r}")
    if not (0.0 < sample_rate <= 1.0):
        raise AccountingError(f"the sample rate q must lie in (0, 1], got {sample_rate!r}")

    def cost(r: float) -> float:
        return query_rdp(r, alpha, n_models, sample_rate, bound)

    lo, hi = 0.0, epsilon_per_query
    while cost(hi) <= epsilon_per_query:
        lo, hi = hi, hi * 2.0
        if hi > 1e6:
            return lo
    while hi - lo > rel_tol * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cost(mid) <= epsilon_per_query else (lo, mid)
    return lo


def paper_theorem51_beta(epsilon_per_query: float, alpha: float, n_models: int) -> float:
    """Eq. 6 exactly as published (ball at order α, radius αβ). Not used to release tokens:
    kept to show what the paper would choose, and to test that it can be exceeded."""
    a = float(alpha)
    if n_models == 1:
        return epsilon_per_query / a
    inner = n_models * math.exp((a - 1) * epsilon_per_query) + 1 - n_models
    return math.log(inner) / (4 * (a - 1) * a)


def paper_realised_size_beta(
    epsilon_per_query: float, alpha: float, subset_size: int, sample_rate: float
) -> float:
    """β* as §5.2 of the paper computes it at a realised subset size (order-α ball, the
    paper's ε(k) with k substituted for α). Shown by ``privlm plan pmixed`` for comparison
    only; privlm does not release tokens with it (see the module docstring)."""
    a = check_alpha(alpha)

    def eps_k(beta: float, k: int) -> float:
        if subset_size <= 1:
            return beta * k
        x = (k - 1) * 4 * beta * k
        return float((np.logaddexp(math.log(subset_size - 1), x) - math.log(subset_size)) / (k - 1))

    def cost(beta: float) -> float:
        curve = [eps_k(beta, k) for k in range(2, a + 1)]
        return float(poisson_subsampled_rdp(curve, sample_rate, [a])[0])

    lo, hi = 0.0, epsilon_per_query
    while cost(hi) <= epsilon_per_query:
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if cost(mid) <= epsilon_per_query else (lo, mid)
    return lo
