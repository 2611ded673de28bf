"""DP-SGD accounting against Opacus and dp-accounting, and noise calibration round trips."""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld
from dp_accounting import rdp as dp_rdp
from opacus.accountants import RDPAccountant

from privlm.accounting import (
    DEFAULT_ORDERS,
    INTEGER_ORDERS,
    DpSgdPlan,
    RdpCurve,
    calibrate_noise_multiplier,
    dpsgd_epsilon,
)
from privlm.errors import AccountingError

pytestmark = pytest.mark.fast

GRID = [
    (sigma, q, steps)
    for sigma in (0.6, 1.0, 1.5, 4.0)
    for q in (0.001, 0.01, 0.04, 0.25)
    for steps in (1, 100, 2250)
]


@pytest.mark.parametrize(("sigma", "q", "steps"), GRID)
def test_rdp_accountant_matches_opacus(sigma, q, steps):
    acc = RDPAccountant()
    acc.history = [(sigma, q, steps)]
    eps, order = acc.get_privacy_spent(delta=1e-5, alphas=list(DEFAULT_ORDERS))
    ours = dpsgd_epsilon(sigma, q, steps, 1e-5, "rdp")
    assert ours.epsilon == pytest.approx(eps, rel=1e-10)
    assert ours.order == order


def _dp_accounting_event(sigma, q, steps):
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
    )


@pytest.mark.parametrize(("sigma", "q", "steps"), GRID[::3])
def test_rdp_at_integer_orders_matches_dp_accounting(sigma, q, steps):
    """Independent of Opacus: dp-accounting's RDP accountant at the same integer orders
    (dp-accounting 0.6.0 is loose at fractional orders, so those are not compared)."""
    orders = list(INTEGER_ORDERS)
    acc = dp_rdp.RdpAccountant(orders=orders)
    acc.compose(_dp_accounting_event(sigma, q, steps))
    theirs, their_order = acc.get_epsilon_and_optimal_order(1e-5)
    curve = DpSgdPlan(sigma, q, steps).rdp_curve()
    ours = RdpCurve.from_arrays(orders, curve.at(orders)).to_dp(1e-5)
    assert ours.epsilon == pytest.approx(theirs, rel=1e-6)
    assert ours.order == their_order


@pytest.mark.parametrize(
    ("sigma", "q", "steps"), [(1.5, 0.04, 2250), (1.0, 0.01, 1000), (0.8, 0.004, 5000)]
)
def test_prv_is_tighter_than_rdp_and_agrees_with_pld_and_opacus_prv(sigma, q, steps):
    from opacus.accountants import PRVAccountant

    prv = dpsgd_epsilon(sigma, q, steps, 1e-5, "prv").epsilon
    rdp = dpsgd_epsilon(sigma, q, steps, 1e-5, "rdp").epsilon
    acc = pld.PLDAccountant()  # dp-accounting's finer default grid
    acc.compose(_dp_accounting_event(sigma, q, steps))
    fine = acc.get_epsilon(1e-5)
    opacus = PRVAccountant()
    opacus.history = [(sigma, q, steps)]
    theirs = opacus.get_epsilon(delta=1e-5, eps_error=0.01)
    assert prv < rdp
    # pessimistic on a coarser grid: never below the finer PLD, and close to it
    assert fine <= prv <= fine * 1.005
    assert prv == pytest.approx(theirs, rel=0.02)


def test_acceptance_value():
    """The figure the foundation issue pins: σ=1.5, q=0.04, 2250 steps, δ=1e-5, against
    Opacus's RDP accountant with its own default orders."""
    acc = RDPAccountant()
    acc.history = [(1.5, 0.04, 2250)]
    expected, _ = acc.get_privacy_spent(delta=1e-5)
    assert dpsgd_epsilon(1.5, 0.04, 2250, 1e-5).epsilon == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("accountant", ["rdp", "prv"])
@pytest.mark.parametrize(
    ("target", "q", "steps"), [(8.0, 0.04, 2250), (3.0, 0.01, 500), (1.0, 0.002, 1000)]
)
def test_calibration_round_trip_never_overshoots(accountant, target, q, steps):
    cal = calibrate_noise_multiplier(target, 1e-5, q, steps, accountant)
    eps = dpsgd_epsilon(cal.noise_multiplier, q, steps, 1e-5, accountant).epsilon
    assert eps <= target
    assert eps == cal.epsilon
    # tight: 0.1% less noise overshoots the target
    below = dpsgd_epsilon(cal.noise_multiplier * 0.999, q, steps, 1e-5, accountant).epsilon
    assert below > target


@pytest.mark.parametrize(
    ("target", "q", "steps"), [(8.0, 0.04, 2250), (3.0, 0.1, 30), (0.5, 0.001, 10000)]
)
def test_calibration_decides_each_sigma_as_the_whole_grid_does(target, q, steps):
    """The calibration computes only the fractional orders that could fit (a lower bound from
    the integer order below each): on a sweep of σ across the target, its yes or no equals
    the whole grid's ε ≤ target, and a σ smaller by the tolerance does not fit."""
    from privlm.accounting.dpsgd import _rdp_fits

    cal = calibrate_noise_multiplier(target, 1e-5, q, steps)
    for sigma in cal.noise_multiplier * np.geomspace(0.5, 2.0, 15):
        whole = dpsgd_epsilon(sigma, q, steps, 1e-5).epsilon <= target
        assert _rdp_fits(float(sigma), q, steps, 1e-5, target) == whole, sigma
    below = cal.noise_multiplier * (1 - 1e-4)
    assert dpsgd_epsilon(below, q, steps, 1e-5).epsilon > target >= cal.epsilon


def test_calibration_agrees_with_opacus_get_noise_multiplier():
    from opacus.accountants.utils import get_noise_multiplier

    theirs = get_noise_multiplier(
        target_epsilon=8.0,
        target_delta=1e-5,
        sample_rate=0.04,
        steps=2250,
        accountant="rdp",
        epsilon_tolerance=0.001,
    )
    ours = calibrate_noise_multiplier(8.0, 1e-5, 0.04, 2250).noise_multiplier
    assert ours == pytest.approx(theirs, rel=2e-3)


def test_calibration_impossible_target_is_refused():
    with pytest.raises(AccountingError, match="no noise multiplier"):
        calibrate_noise_multiplier(1e-4, 1e-5, 1.0, 100000, max_sigma=50.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"noise_multiplier": 0.0},
        {"noise_multiplier": -1.0},
        {"sample_rate": 0.0},
        {"sample_rate": 1.5},
        {"steps": 0},
        {"steps": 2.5},
        {"delta": 0.0},
        {"accountant": "moments"},
    ],
)
def test_bad_parameters_refused(kwargs):
    args = {"noise_multiplier": 1.0, "sample_rate": 0.01, "steps": 10, "delta": 1e-5}
    args.update(kwargs)
    with pytest.raises(AccountingError):
        dpsgd_epsilon(**args)


def test_more_steps_cost_more_at_fixed_order():
    a = DpSgdPlan(1.0, 0.01, 100).rdp_curve()
    b = DpSgdPlan(1.0, 0.01, 200).rdp_curve()
    np.testing.assert_allclose(a.times(2).epsilons, b.epsilons, rtol=1e-12)
