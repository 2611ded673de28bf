"""RDP → (ε, δ) conversion: Theorem C.3 against Opacus and against exact Gaussian DP."""

from __future__ import annotations

import math

import numpy as np
import pytest
from opacus.accountants.analysis.rdp import get_privacy_spent
from scipy.stats import norm

from privlm.accounting import DEFAULT_ORDERS, balle_epsilon, classic_epsilon, gaussian_rdp
from privlm.errors import AccountingError

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-8])
@pytest.mark.parametrize("scale", [0.01, 0.3, 2.0])
def test_balle_matches_opacus_conversion(delta, scale):
    orders = np.asarray(DEFAULT_ORDERS)
    rdp = scale * orders  # any non-negative curve
    ours = balle_epsilon(orders, rdp, delta)
    eps, order = get_privacy_spent(orders=orders.tolist(), rdp=rdp.tolist(), delta=delta)
    assert ours.epsilon == pytest.approx(eps, rel=1e-12)
    assert ours.order == order


def test_balle_closed_form_at_one_order():
    a, rho, d = 5.0, 0.7, 1e-6
    expected = rho + math.log((a - 1) / a) - (math.log(d) + math.log(a)) / (a - 1)
    assert balle_epsilon([a], [rho], d).epsilon == pytest.approx(expected, rel=1e-14)
    assert classic_epsilon([a], [rho], d).epsilon == pytest.approx(
        rho + math.log(1 / d) / (a - 1), rel=1e-14
    )


def _exact_gaussian_delta(eps: float, sigma: float) -> float:
    """Balle & Wang 2018, Theorem 8: the exact δ(ε) of the Gaussian mechanism (Δ = 1)."""
    return norm.cdf(1 / (2 * sigma) - eps * sigma) - math.exp(eps) * norm.cdf(
        -1 / (2 * sigma) - eps * sigma
    )


@pytest.mark.parametrize("sigma", [0.8, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("delta", [1e-4, 1e-6])
def test_conversion_never_understates_exact_gaussian(sigma, delta):
    """The RDP-derived ε is a valid bound: at that ε, the exact δ is at most the target."""
    conv = balle_epsilon(DEFAULT_ORDERS, gaussian_rdp(sigma, DEFAULT_ORDERS), delta)
    assert _exact_gaussian_delta(conv.epsilon, sigma) <= delta
    # ... and it is not vacuous: within a factor 1.6 of the exact ε.
    lo, hi = 0.0, conv.epsilon
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _exact_gaussian_delta(mid, sigma) <= delta else (mid, hi)
    assert conv.epsilon <= 1.6 * hi


def test_balle_never_above_classic():
    rdp = gaussian_rdp(1.3, DEFAULT_ORDERS) * 50
    assert (
        balle_epsilon(DEFAULT_ORDERS, rdp, 1e-5).epsilon
        < classic_epsilon(DEFAULT_ORDERS, rdp, 1e-5).epsilon
    )


@pytest.mark.parametrize("delta", [0.0, 1.0, -1e-5, float("nan")])
def test_bad_delta_refused(delta):
    with pytest.raises(AccountingError, match="δ"):
        balle_epsilon([2.0], [0.1], delta)


def test_bad_orders_and_values_refused():
    with pytest.raises(AccountingError):
        balle_epsilon([1.0], [0.1], 1e-5)
    with pytest.raises(AccountingError):
        balle_epsilon([2.0], [-0.1], 1e-5)


def test_infinite_rdp_gives_infinite_epsilon_not_nan():
    assert balle_epsilon([2.0, 3.0], [np.inf, np.inf], 1e-5).epsilon == math.inf
