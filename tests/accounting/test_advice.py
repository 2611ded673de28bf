"""The plain-language checks of δ and of PromptPATE's threshold, against
closed forms computed here and a Monte Carlo of the threshold check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from privlm.accounting.advice import (
    NOISE_PASS_LIMIT,
    suggested_delta,
    threshold_warning,
    weak_delta_warning,
)
from privlm.errors import AccountingError

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("n", [1, 20, 1000, 10**6, 10**9])
def test_the_suggested_delta_is_far_below_one_over_n(n):
    d = suggested_delta(n)
    assert d < 1 / n or (n == 1 and d == 1e-6)
    assert d == min(n**-1.1, 1e-6)  # the closed form, for every mechanism's default
    assert weak_delta_warning(d, n) is None


def test_the_suggested_delta_needs_a_unit():
    with pytest.raises(AccountingError, match="at least one"):
        suggested_delta(0)


def test_weak_delta_is_flagged_with_the_reason_and_the_fix():
    at_one_over_n = weak_delta_warning(0.05, 20, "user")
    assert at_one_over_n is not None and "one whole user to leak" in at_one_over_n
    assert "--delta 1e-06" in at_one_over_n
    loose = weak_delta_warning(20**-1.1, 20)  # 1/n^1.1, privlm's old DP-SGD default
    assert loose is not None and "fail outright with probability 0.0371" in loose
    assert weak_delta_warning(1e-5, 50_000) is None
    assert weak_delta_warning(2e-4, 50_000) is not None  # above 1e-4 whatever n is


def normal_sf(x: float) -> float:
    return 0.5 * math.erfc(x / math.sqrt(2))


def test_a_threshold_above_the_teacher_count_is_flagged_with_the_unanimous_pass_rate():
    """The issue's run: 30 teachers, T = 60, σ₁ = 30. A unanimous vote passes only when the
    noise adds 30, with probability P(N(0, 30²) ≥ 30) = 15.9 %."""
    message = threshold_warning(60, 30, 30, 2)
    assert message is not None and "not below the 30 teachers" in message
    assert f"{normal_sf(1.0):.0%}" in message
    rng = np.random.default_rng(0)
    passes = np.mean(30 + rng.normal(0, 30, 200_000) >= 60)
    assert passes == pytest.approx(normal_sf(1.0), abs=0.005)


@pytest.mark.parametrize(("teachers", "classes", "threshold", "sigma1"), [
    (100, 2, 60, 30), (250, 10, 200, 150), (100, 6, 60, 30), (40, 4, 30, 5),
])  # fmt: skip
def test_noise_passing_evenly_split_queries_is_flagged_above_the_limit(
    teachers, classes, threshold, sigma1
):
    p_even = normal_sf((threshold - teachers / classes) / sigma1)
    flagged = threshold_warning(threshold, sigma1, teachers, classes) is not None
    assert flagged == (p_even > NOISE_PASS_LIMIT)
