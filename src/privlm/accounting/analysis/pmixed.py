"""PMixED's per-query privacy loss, and the RD-ball radius that meets a per-query budget.

The PMixED paper (``shared/papers/000``) mollifies each model p_i toward the public model p₀
inside a Rényi-divergence ball (Eq. 5), bounds the loss of the averaged output (Theorem 5.1)
and amplifies it by Poisson subsampling (§5.2, Theorem C.4 / Eq. 12).

**Which relation.** The paper proves its bound for one ensemble member added or removed.
privlm's ensembles have a fixed number of parts (keyed hash), so one privacy unit more or
less changes one part's data: one member's model is *replaced*. The per-unit charge is
:func:`replacement_rdp` (``bound="replacement"``, the default and the only bound a ledger is
charged with); its proof is in docs/sharp_edges.md ("PMixED per unit"). The add/remove
bounds below (``expansion``, ``jensen``) are per-part statements, kept for comparison.

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

**From one model to a subset of m.** With Q the average of the other m − 1
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

import functools
import math

import numpy as np

from privlm.accounting.analysis import pmixed_bounds as _bounds
from privlm.accounting.analysis.poisson_amplification import poisson_subsampled_rdp
from privlm.errors import AccountingError

# the bounds' names live in a module without NumPy (pmixed_bounds); here they are the same
BOUNDS = _bounds.BOUNDS
DEFAULT_BOUND = _bounds.DEFAULT_BOUND
PER_PART_BOUNDS = _bounds.PER_PART_BOUNDS
PER_UNIT_BOUNDS = _bounds.PER_UNIT_BOUNDS
RELATIONS = _bounds.RELATIONS
REPLACEMENT = _bounds.REPLACEMENT
check_alpha = _bounds.check_alpha
check_bound = _bounds.check_bound
check_per_unit = _bounds.check_per_unit
is_per_unit = _bounds.is_per_unit
relation = _bounds.relation


def ball_order(alpha: float) -> float:
    """The order at which the RD ball is enforced: 2α (see the module docstring)."""
    return 2.0 * check_alpha(alpha)


def pairwise_bound(radius: float, order: int) -> float:
    """d(k): bound on D_k between one mollified model and an average of others."""
    k = float(order)
    return ((k - 0.5) / (k - 1.0) + 1.0) * radius


# -- the replace-one-member bound (per unit) -------------------------------------------------


def replacement_pairwise_bound(radius: float, alpha: float) -> float:
    """d*: bound on D_ℓ(X ‖ Z), both directions, for X, Z in the order-2α ball and every
    integer 2 ≤ ℓ ≤ α: Mironov's weak triangle inequality (Proposition 11) through p₀ with
    Hölder exponent p = (2α−1)/(2α−ℓ), which puts both orders at most 2α::

        D_ℓ(X ‖ Z) ≤ 2α/(2α−1) · D_{pℓ}(X ‖ p₀) + D_{2α}(p₀ ‖ Z) ≤ (2α/(2α−1) + 1) · ρ
    """
    a = 2.0 * check_alpha(alpha)
    return (a / (a - 1.0) + 1.0) * float(radius)


def replacement_weight(n_models: int, sample_rate: float) -> float:
    """w = E[1{i ∈ S}/|S|] = (1 − (1−q)^N)/N: the weight of one member's mollified model in
    the released distribution, marginalised over the Poisson subset S."""
    n, q = int(n_models), float(sample_rate)
    if q >= 1.0:
        return 1.0 / n
    return float(-math.expm1(n * math.log1p(-q)) / n)


def _log_expm1(x: float) -> float:
    """log(e^x − 1) for x > 0, without overflow."""
    if x <= 0:
        return -math.inf
    return x + math.log(-math.expm1(-x))


def chi_square_bound(radius: float, max_order: float) -> float:
    """A bound on χ²(X ‖ Z) = E_Z (X/Z − 1)² when D↔_M(X ‖ Z) ≤ r for every M ≤ max_order.

    M = 2: e^r − 1. Any real M ≥ 3: with s = X/Z − 1 and φ_γ(t) = t^γ − 1 − γ(t − 1),
    a·φ_M + b·φ_{1−M} − s² has value and first three derivatives 0 at t = 1 for
    a = (M+1)/((2M−1)K), b = (M−2)/((2M−1)K), K = M(M−1)/2, and a positive fourth
    derivative, so it is ≥ 0 (Taylor); taking expectations,
    E s² ≤ (a + b)(e^{(M−1)r} − 1) = 2(e^{(M−1)r} − 1)/(M(M−1)). Each M gives a valid bound;
    the least over a grid of M is returned."""
    return _chi_square_bound(float(radius), float(max_order))


@functools.lru_cache(maxsize=4096)
def _chi_square_bound(r: float, max_order: float) -> float:
    """:func:`chi_square_bound`, remembered: every moment j of every order k of a radius
    search asks for the same one (a pure function of its two floats)."""
    best = math.expm1(r)
    if max_order >= 3:
        m = np.linspace(3.0, max_order, 64)
        ok = (m - 1.0) * r < 700.0
        if ok.any():
            m = m[ok]
            best = min(best, float(np.min(2.0 * np.expm1((m - 1.0) * r) / (m * (m - 1.0)))))
    return best


def _log_central_moment(j: int, r: float, max_order: float) -> float:
    """log of a bound on E_Z|X/Z − 1|^j when D↔_M(X ‖ Z) ≤ r for M ≤ max_order (j ≤
    max_order): the χ² bound for j = 2; for j ≥ 3, |s|^j ≤ (1+s)^j − 1 − js + s² on
    s ≥ −1 gives E|s|^j ≤ (e^{(j−1)r} − 1) + χ²."""
    log_chi2 = math.log(chi_square_bound(r, max_order)) if r > 0 else -math.inf
    if j == 2:
        return log_chi2
    return float(np.logaddexp(_log_expm1((j - 1) * r), log_chi2))


def fourth_moment_bound(radius: float, max_order: float) -> float:
    """A bound on E_Z (X/Z − 1)⁴ when D↔_M(X ‖ Z) ≤ r for every M ≤ max_order (> 4).

    For real M > 4, with t = X/Z and φ_γ(t) = t^γ − 1 − γ(t − 1), the function
    h = A·φ_M + B·φ_{1−M} − (t − 1)⁴ has h(1) = h′(1) = 0 and
    h″ = M(M−1)(A·t^{M−2} + B·t^{−M−1}) − 12(t − 1)², which is ≥ 0 on t ≥ 1 once
    A = 12/(M(M−1)) · max_{t≥1} (t−1)²t^{2−M} = 12/(M(M−1)) · (2/(M−4))² ((M−4)/(M−2))^{M−2}
    (at t = (M−2)/(M−4)), and on 0 < t ≤ 1 once
    B = 12/(M(M−1)) · max_{t≤1} (1−t)²t^{M+1} = 12/(M(M−1)) · (2/(M+3))² ((M+1)/(M+3))^{M+1}
    (at t = (M+1)/(M+3)). So h is convex and ≥ 0; with E_Z t = 1, E_Z φ_M = e^{(M−1)D_M(X‖Z)} − 1
    and E_Z φ_{1−M} = e^{(M−1)D_M(Z‖X)} − 1, so E (t − 1)⁴ ≤ (A + B)(e^{(M−1)r} − 1). The least
    over a grid of M is returned (∞ when max_order ≤ 4)."""
    return _fourth_moment_bound(float(radius), float(max_order))


@functools.lru_cache(maxsize=4096)
def _fourth_moment_bound(r: float, max_order: float) -> float:
    if max_order <= 4.0:
        return math.inf
    m = np.linspace(max_order, 4.0, 65)[:-1]  # (4, max_order]
    m = m[(m - 1.0) * r < 700.0]
    if not m.size:
        return math.inf
    k = 12.0 / (m * (m - 1.0))
    a = k * (2.0 / (m - 4.0)) ** 2 * ((m - 4.0) / (m - 2.0)) ** (m - 2.0)
    b = k * (2.0 / (m + 3.0)) ** 2 * ((m + 1.0) / (m + 3.0)) ** (m + 1.0)
    return float(np.min((a + b) * np.expm1((m - 1.0) * r)))


def inverse_chi_square_bound(radius: float, max_order: float) -> float:
    """A bound on E_Z (Z/P − 1)² when D↔_M(P ‖ Z) ≤ r for every M ≤ max_order (≥ 3).

    With v = Z/P, E_Z v = e^{D_2(Z‖P)} ≥ 1, E_Z v^γ = e^{γ·D_{γ+1}(Z‖P)} and
    E_Z v^{1−γ} = e^{(γ−2)·D_{γ−1}(P‖Z)}. γ = 2: E (v − 1)² ≤ E v² − 1 ≤ e^{2r} − 1 (order 3).
    Real 3 ≤ M ≤ max_order − 1: :func:`chi_square_bound`'s pointwise inequality
    (v − 1)² ≤ a·φ_M(v) + b·φ_{1−M}(v) and E v ≥ 1 give
    E (v − 1)² ≤ a(e^{M r} − 1) + b(e^{(M−2) r} − 1 + (M − 1)(e^{r} − 1)). The least over a
    grid of M is returned."""
    return _inverse_chi_square_bound(float(radius), float(max_order))


@functools.lru_cache(maxsize=4096)
def _inverse_chi_square_bound(r: float, max_order: float) -> float:
    if max_order < 3.0:
        return math.inf
    best = math.expm1(2.0 * r) if 2.0 * r < 700.0 else math.inf
    if max_order - 1.0 >= 3.0:
        m = np.linspace(3.0, max_order - 1.0, 64)
        m = m[m * r < 700.0]
        if m.size:
            k = m * (m - 1.0) / 2.0
            a = (m + 1.0) / ((2.0 * m - 1.0) * k)
            b = (m - 2.0) / ((2.0 * m - 1.0) * k)
            tail = np.expm1((m - 2.0) * r) + (m - 1.0) * math.expm1(r)
            best = min(best, float(np.min(a * np.expm1(m * r) + b * tail)))
    return best


def log_second_moment_through_p0(radius: float, alpha: float) -> float:
    """log of a bound on M₂ = Σ (X − Y)²/P' for X, Y and P' in the order-2α ball of radius ρ
    (docs/sharp_edges.md, "PMixED per unit", step 8). With x, y, u the ratios to p₀ and
    v = 1/u: (x − y)² ≤ 2(x − 1)² + 2(y − 1)², and
    E_{p₀}(x − 1)²v = E(x − 1)² + E(x − 1)²(v − 1) ≤ χ² + √(E(x − 1)⁴ · E(v − 1)²)
    (Cauchy–Schwarz), so M₂ ≤ 4(χ²(ρ) + √(m₄(ρ)·v₂(ρ))), every moment read against p₀ at
    the ball's radius and order."""
    order = ball_order(alpha)
    m4 = fourth_moment_bound(radius, order)
    v2 = inverse_chi_square_bound(radius, order)
    if math.isinf(m4) or math.isinf(v2):  # no certificate at this order (α = 2): no bound
        return math.inf
    bound = 4.0 * (chi_square_bound(radius, order) + math.sqrt(m4 * v2))
    return math.log(bound) if bound > 0.0 else -math.inf  # ρ = 0: every member is p₀


def check_lambda_cap(lambda_cap: float) -> float:
    """The largest mixing weight λ a member may take: in (0, 1] (1: the paper's rule)."""
    cap = float(lambda_cap)
    if not 0.0 < cap <= 1.0:
        raise AccountingError(f"the λ cap must lie in (0, 1], got {lambda_cap!r}")
    return cap


def public_floor(n_models: int, sample_rate: float, lambda_cap: float = 1.0) -> float:
    """γ: the release is at least γ·p₀ at every token, whatever the members and the subset.

    The empty subset (probability c = (1−q)^N) answers p₀, and every mollified member
    λ_i p_i + (1 − λ_i) p₀ with λ_i ≤ cap is at least (1 − cap)·p₀, so any average of them
    is too: γ = c + (1 − c)(1 − cap)."""
    n, q, cap = int(n_models), float(sample_rate), check_lambda_cap(lambda_cap)
    c = 0.0 if q >= 1.0 else math.exp(n * math.log1p(-q))
    return c + (1.0 - c) * (1.0 - cap)


def replacement_rdp(
    radius: float,
    order: int,
    n_models: int,
    sample_rate: float,
    alpha: float,
    lambda_cap: float = 1.0,
) -> float:
    """ε_R(k): RDP at order k ≤ α of one PMixED query, one member replaced (per unit).

    Marginalised over the Poisson subset, the release is P = (1−w)·A + w·X against
    P' = (1−w)·A + w·Y (w of :func:`replacement_weight`; X, Y the old and new member, A the
    rest, all in the order-2α ball). The binomial expansion of E_{P'}[(P/P')^k] (the first
    order vanishes) bounds the j-th term by M_j = Σ |X − Y|^j P'^{1−j}, and each M_j by the
    smallest of its bounds (docs/sharp_edges.md, "PMixED per unit")::

        through Z:  2^j [c·μ_j(ρ) + (1−c)·μ_j(d*)]       (convexity over P' = c·p₀ + (1−c)·Z,
                                                          c = (1−q)^N, and Minkowski)
        the floor:  2^j μ_j(ρ) / γ^{j−1}                (P' ≥ γ·p₀: :func:`public_floor`)
        j = 2 only: 4(χ²(ρ) + √(m₄(ρ)·v₂(ρ)))           (P' in the ball, read against p₀:
                                                          :func:`log_second_moment_through_p0`)

        ε_R(k) = log(1 + Σ_{j=2..k} C(k,j) w^j · min(…)) / (k−1)

    with μ_j the central-moment bounds of :func:`_log_central_moment`. Joint convexity
    gives also ε_R(k) ≤ log(1 − w + w·e^{(k−1)d*})/(k−1); the smaller is returned. The
    floor is what a cap on λ buys (``lambda_cap`` < 1): every member keeps a share of p₀,
    so the other members' distributions never sit far below p₀, and the moments are read
    against p₀ (radius ρ) rather than against another member (radius d* ≈ 2.2ρ).
    """
    k = int(order)
    a = check_alpha(alpha)
    if not 2 <= k <= a:
        raise AccountingError(f"the replacement bound holds at integer orders 2..α, got {order}")
    if n_models < 1:
        raise AccountingError("PMixED needs at least one model")
    q = float(sample_rate)
    w = replacement_weight(n_models, q)
    d = replacement_pairwise_bound(radius, alpha)
    log_c = n_models * math.log1p(-q) if q < 1.0 else -math.inf
    log_1mc = math.log(-math.expm1(log_c)) if q < 1.0 else 0.0
    gamma = public_floor(n_models, q, lambda_cap)
    log_gamma = math.log(gamma) if gamma > 0.0 else -math.inf
    terms = []
    for j in range(2, k + 1):
        against_p0 = _log_central_moment(j, radius, 2.0 * a)  # the ball
        public = log_c + against_p0
        members = log_1mc + _log_central_moment(j, d, a)  # against a member: d* up to α
        through_z = float(np.logaddexp(public, members))
        floor = against_p0 - (j - 1) * log_gamma if gamma > 0.0 else math.inf
        log_binom = math.lgamma(k + 1) - math.lgamma(j + 1) - math.lgamma(k - j + 1)
        log_mj = j * math.log(2.0) + min(through_z, floor)
        if j == 2:  # step 8: the second moment read against p₀ through Cauchy–Schwarz
            log_mj = min(log_mj, log_second_moment_through_p0(radius, a))
        terms.append(log_binom + j * math.log(w) + log_mj)
    top = max(terms)  # log Σ e^t, in plain floats (scipy's logsumexp costs 30× more here)
    log_sum = top + math.log(math.fsum(math.exp(t - top) for t in terms))
    expansion = (log_sum if log_sum > 700.0 else math.log1p(math.exp(log_sum))) / (k - 1)
    log_1mw = math.log1p(-w) if w < 1.0 else -math.inf
    convexity = float(np.logaddexp(log_1mw, math.log(w) + (k - 1) * d)) / (k - 1)
    return float(min(expansion, convexity))


def subset_rdp(radius: float, order: int, subset_size: int, bound: str = "expansion") -> float:
    """ε_m(k): RDP at order k of averaging m mollified models, one added or removed (module
    docstring: Eq. 12 at rate 1/m on d(2..k), or Jensen's step of Theorem 5.1). A per-part
    (add/remove) quantity: the replacement bound does not go through subset sizes."""
    k, m = int(order), int(subset_size)
    if check_bound(bound) == REPLACEMENT:
        raise AccountingError("the replacement bound has no per-subset-size loss")
    if m <= 1:
        return float(radius)
    if check_bound(bound) == "expansion":
        base = [pairwise_bound(radius, ell) for ell in range(2, k + 1)]
        return float(poisson_subsampled_rdp(base, 1.0 / m, [k])[0])
    x = (k - 1) * pairwise_bound(radius, k)
    # log((m-1)/m + e^x/m), stably
    return float((np.logaddexp(math.log(m - 1), x) - math.log(m)) / (k - 1))


def mechanism_rdp(
    radius: float, order: int, n_models: int, sample_rate: float, bound: str = "expansion"
) -> float:
    """ε(k) of the (unsubsampled) mixture over every subset size it may meet."""
    if n_models < 1:
        raise AccountingError("PMixED needs at least one model")
    sizes = [n_models] if sample_rate >= 1.0 else range(1, n_models + 1)
    return max(subset_rdp(radius, order, m, bound) for m in sizes)


def query_rdp_curve(
    radius: float,
    alpha: float,
    n_models: int,
    sample_rate: float,
    bound: str = DEFAULT_BOUND,
    lambda_cap: float = 1.0,
) -> dict[float, float]:
    """Per-query RDP at integer orders 2..α: per unit (``replacement``, with the λ cap the
    mechanism applies), or per part after Poisson subsampling by Eq. 12 (``expansion``,
    ``jensen``: they hold for any λ ≤ 1, so a cap only makes them conservative)."""
    a = check_alpha(alpha)
    cap = check_lambda_cap(lambda_cap)
    if check_bound(bound) == REPLACEMENT:
        return {
            float(k): replacement_rdp(radius, k, n_models, sample_rate, a, cap)
            for k in range(2, a + 1)
        }
    base = [mechanism_rdp(radius, k, n_models, sample_rate, bound) for k in range(2, a + 1)]
    orders = list(range(2, a + 1))
    amplified = poisson_subsampled_rdp(base, min(sample_rate, 1.0), orders)
    return {float(k): float(v) for k, v in zip(orders, amplified, strict=True)}


def query_rdp(
    radius: float,
    alpha: float,
    n_models: int,
    sample_rate: float,
    bound: str = DEFAULT_BOUND,
    lambda_cap: float = 1.0,
) -> float:
    """ε'_q(α): the per-query RDP at order α."""
    curve = query_rdp_curve(radius, alpha, n_models, sample_rate, bound, lambda_cap)
    return curve[float(check_alpha(alpha))]


@functools.lru_cache(maxsize=1024)
def solve_radius(
    epsilon_per_query: float,
    alpha: float,
    n_models: int,
    sample_rate: float,
    rel_tol: float = 1e-10,
    bound: str = DEFAULT_BOUND,
    lambda_cap: float = 1.0,
) -> float:
    """ρ* = max{ρ : ε'_q(α; ρ) ≤ ε_G/T} (the §5.2 rule, on the sound bound), rounded down."""
    check_alpha(alpha)
    check_bound(bound)
    check_lambda_cap(lambda_cap)
    if not (epsilon_per_query > 0 and math.isfinite(epsilon_per_query)):
        raise AccountingError(f"the per-query budget must be positive, got {epsilon_per_query!r}")
    if not (0.0 < sample_rate <= 1.0):
        raise AccountingError(f"the sample rate q must lie in (0, 1], got {sample_rate!r}")

    def cost(r: float) -> float:
        return query_rdp(r, alpha, n_models, sample_rate, bound, lambda_cap)

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
