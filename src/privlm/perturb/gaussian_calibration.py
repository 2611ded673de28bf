"""The analytic Gaussian mechanism (Balle & Wang 2018, Theorem 8), in log space.

For the Gaussian mechanism with ℓ₂ sensitivity Δ and noise σ, the exact privacy profile is

    δ(ε) = Φ(Δ/(2σ) − εσ/Δ) − e^ε · Φ(−Δ/(2σ) − εσ/Δ),

so σ(ε, δ) is the smallest σ with δ(ε) ≤ δ and ε(σ, δ) the smallest ε with δ(ε) ≤ δ; both
are found by bisection (δ(ε) decreases in σ and in ε). The browser runs the same bisection
(``perturb.js``) with its own log Φ; the two are compared through the shared test vectors.
"""

from __future__ import annotations

import math

from privlm.errors import PrivlmError

BISECTION_STEPS = 200


def check_epsilon_delta(epsilon: float, delta: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise PrivlmError(f"ε must be a positive finite number, not {epsilon!r}")
    if not (0 < delta < 1):
        raise PrivlmError(f"δ must lie strictly between 0 and 1, not {delta!r}")


def gaussian_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """δ(ε) of the Gaussian mechanism (Balle & Wang 2018, Theorem 8), exact."""
    from scipy.special import log_ndtr  # here: a CLI's --help needs no SciPy

    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    l1 = float(log_ndtr(a - b))
    l2 = epsilon + float(log_ndtr(-a - b))
    if l2 >= l1:
        return 0.0
    return float(math.exp(l1) * -math.expm1(l2 - l1))


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """The smallest σ (to bisection precision, rounded up) with δ(ε) ≤ δ."""
    check_epsilon_delta(epsilon, delta)
    if not (math.isfinite(sensitivity) and sensitivity > 0):
        raise PrivlmError(f"sensitivity must be positive, not {sensitivity!r}")
    lo, hi = 1e-6 * sensitivity, sensitivity
    while gaussian_delta(epsilon, hi, sensitivity) > delta:
        hi *= 2.0
    for _ in range(BISECTION_STEPS):
        mid = math.sqrt(lo * hi)
        if gaussian_delta(epsilon, mid, sensitivity) > delta:
            lo = mid
        else:
            hi = mid
        if hi / lo - 1.0 < 1e-13:
            break
    return hi


def gaussian_epsilon(sigma: float, sensitivity: float, delta: float) -> float:
    """The smallest ε (to bisection precision, rounded up) with δ(ε) ≤ δ for noise σ."""
    if not (0 < delta < 1):
        raise PrivlmError(f"δ must lie strictly between 0 and 1, not {delta!r}")
    if gaussian_delta(0.0, sigma, sensitivity) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while gaussian_delta(hi, sigma, sensitivity) > delta:
        lo, hi = hi, hi * 2.0
    for _ in range(BISECTION_STEPS):
        mid = 0.5 * (lo + hi)
        if gaussian_delta(mid, sigma, sensitivity) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return hi
