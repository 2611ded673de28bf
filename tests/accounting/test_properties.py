"""Property tests (hypothesis): monotonicity of ε, and amplification never hurts. The
searches over DP-SGD's ε (a counterexample hunt, like the adversarial searches) are proofs:
``make proof`` runs them, ``make fast`` leaves them out."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from privlm.accounting import (
    DEFAULT_ORDERS,
    balle_epsilon,
    classic_epsilon,
    dpsgd_epsilon,
    poisson_subsampled_rdp,
)

pytestmark = pytest.mark.fast

sigmas = st.floats(0.3, 20.0)
rates = st.floats(1e-4, 1.0)
steps = st.integers(1, 5000)
deltas = st.floats(1e-10, 1e-2)
FAST = settings(max_examples=60, deadline=None)


@pytest.mark.proof
@FAST
@given(s1=sigmas, s2=sigmas, q=rates, t=steps, d=deltas)
def test_epsilon_decreases_with_noise(s1, s2, q, t, d):
    lo, hi = sorted((s1, s2))
    lower = dpsgd_epsilon(lo, q, t, d).epsilon
    assert dpsgd_epsilon(hi, q, t, d).epsilon <= lower * (1 + 1e-12) + 1e-12  # float rounding


@pytest.mark.proof
@FAST
@given(s=sigmas, q1=rates, q2=rates, t=steps, d=deltas)
def test_epsilon_increases_with_sample_rate(s, q1, q2, t, d):
    lo, hi = sorted((q1, q2))
    assert dpsgd_epsilon(s, lo, t, d).epsilon <= dpsgd_epsilon(s, hi, t, d).epsilon + 1e-12


@pytest.mark.proof
@FAST
@given(s=sigmas, q=rates, t1=steps, t2=steps, d=deltas)
def test_epsilon_increases_with_steps(s, q, t1, t2, d):
    lo, hi = sorted((t1, t2))
    assert dpsgd_epsilon(s, q, lo, d).epsilon <= dpsgd_epsilon(s, q, hi, d).epsilon + 1e-12


# a non-decreasing RDP curve ε(k) on k = 2..40 (every RDP curve is non-decreasing in α)
curves = st.lists(st.floats(0.0, 30.0), min_size=39, max_size=39).map(
    lambda xs: np.cumsum(np.asarray(xs) / 10.0)
)


@FAST
@given(curve=curves, q=st.floats(0.0, 1.0))
def test_amplification_never_increases_epsilon(curve, q):
    orders = list(range(2, 41))
    amplified = poisson_subsampled_rdp(curve, q, orders)
    assert np.all(amplified <= curve + 1e-9)


@FAST
@given(curve=curves, q1=st.floats(0.0, 1.0), q2=st.floats(0.0, 1.0))
def test_amplification_monotone_in_sampling_rate(curve, q1, q2):
    lo, hi = sorted((q1, q2))
    orders = list(range(2, 41))
    assert np.all(
        poisson_subsampled_rdp(curve, lo, orders)
        <= poisson_subsampled_rdp(curve, hi, orders) + 1e-9
    )


@FAST
@given(scale=st.floats(1e-4, 10.0), d=deltas)
def test_balle_bound_is_at_most_classic(scale, d):
    rdp = scale * np.asarray(DEFAULT_ORDERS)
    assert (
        balle_epsilon(DEFAULT_ORDERS, rdp, d).epsilon
        <= classic_epsilon(DEFAULT_ORDERS, rdp, d).epsilon
    )
