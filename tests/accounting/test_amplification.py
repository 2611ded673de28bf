"""Theorem C.4 (Poisson amplification for any RDP mechanism) against independent values."""

from __future__ import annotations

import math

import dp_accounting
import mpmath
import numpy as np
import pytest
from dp_accounting import rdp as dp_rdp

from privlm.accounting import gaussian_rdp, poisson_subsampled_rdp, subsampled_gaussian_rdp
from privlm.errors import AccountingError

pytestmark = pytest.mark.fast

INTS = list(range(2, 41))


@pytest.mark.parametrize("sigma", [0.7, 1.0, 2.5])
@pytest.mark.parametrize("q", [0.001, 0.03, 0.3])
def test_gaussian_curve_amplified_equals_dp_accounting(sigma, q):
    """For the Gaussian, Eq. 12 at integer orders is exactly the subsampled-Gaussian RDP."""
    ours = poisson_subsampled_rdp(lambda k: k / (2 * sigma**2), q, INTS)
    acc = dp_rdp.RdpAccountant(orders=INTS)
    acc.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)))
    theirs = np.asarray(acc._rdp)  # dp-accounting's per-order RDP
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-15)


def _mp_eq12(eps_of_k, q: float, alpha: int) -> float:
    """Eq. 12 evaluated in 60-digit arithmetic, term by term."""
    mpmath.mp.dps = 60
    q = mpmath.mpf(q)
    total = (1 - q) ** (alpha - 1) * (1 + (alpha - 1) * q)
    for k in range(2, alpha + 1):
        total += (
            mpmath.binomial(alpha, k)
            * (1 - q) ** (alpha - k)
            * q**k
            * mpmath.e ** ((k - 1) * mpmath.mpf(eps_of_k(k)))
        )
    return float(mpmath.log(total) / (alpha - 1))


@pytest.mark.parametrize("alpha", [2, 3, 17, 64, 256])
def test_large_orders_match_high_precision(alpha):
    """Log-space evaluation stays exact where naive exponentials overflow (e^{255·40})."""
    eps_of_k = lambda k: 40.0 + 0.1 * k  # noqa: E731 - huge per-order losses
    ours = poisson_subsampled_rdp(eps_of_k, 0.02, [alpha])[0]
    assert math.isfinite(ours)
    assert ours == pytest.approx(_mp_eq12(eps_of_k, 0.02, alpha), rel=1e-10)


def test_q_one_is_no_subsampling_and_q_zero_is_free():
    curve = lambda k: 0.3 * k**0.5  # noqa: E731
    np.testing.assert_allclose(
        poisson_subsampled_rdp(curve, 1.0, INTS), [curve(a) for a in INTS], rtol=1e-12
    )
    assert np.all(poisson_subsampled_rdp(curve, 0.0, INTS) == 0.0)


def test_q_one_gaussian_closed_form():
    sigma = 1.7
    np.testing.assert_allclose(
        subsampled_gaussian_rdp(1.0, sigma, INTS), gaussian_rdp(sigma, INTS), rtol=1e-12
    )
    np.testing.assert_allclose(
        gaussian_rdp(sigma, INTS), np.asarray(INTS) / (2 * sigma**2), rtol=1e-15
    )


def test_array_input_and_infinite_base():
    base = np.full(39, np.inf)
    assert np.all(np.isinf(poisson_subsampled_rdp(base, 0.1, INTS)))
    arr = np.asarray([0.5 * k for k in range(2, 41)])
    np.testing.assert_allclose(
        poisson_subsampled_rdp(arr, 0.1, INTS),
        poisson_subsampled_rdp(lambda k: 0.5 * k, 0.1, INTS),
    )


@pytest.mark.parametrize("orders", [[2.5], [1], [0], []])
def test_non_integer_orders_refused(orders):
    with pytest.raises(AccountingError, match="integer orders"):
        poisson_subsampled_rdp(lambda k: 1.0, 0.1, orders)


def test_short_array_refused_and_bad_q_refused():
    with pytest.raises(AccountingError, match="k = 2"):
        poisson_subsampled_rdp([0.1, 0.2], 0.1, [10])
    with pytest.raises(AccountingError, match="sampling rate"):
        poisson_subsampled_rdp(lambda k: 1.0, 1.5, [2])
