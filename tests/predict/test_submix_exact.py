"""SubMix's leakage accounting, checked against the exact divergence with one part removed.

The output without part i is recomputed from scratch on the remaining parts; the leakage
charged to part i must equal (never fall short of) the exact symmetric order-α divergence.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privlm.predict.mollifier import submix_lambdas
from privlm.predict.submix_rule import submix_step
from tests.predict.exact import random_pmf, renyi, submix_output, sym

pytestmark = [pytest.mark.fast, pytest.mark.proof]  # exact enumerations

ALPHA = 2.0


def make_parts(rng, k, v, similar):
    parts = []
    for _ in range(k):
        a = random_pmf(rng, v, 0.5)
        b = 0.9 * a + 0.1 * random_pmf(rng, v, 0.5) if similar else random_pmf(rng, v, 0.2)
        parts.append((a, b / b.sum()))
    return parts


def step(parts, h0, beta):
    a = torch.log(torch.tensor(np.array([p for p, _ in parts])))
    b = torch.log(torch.tensor(np.array([p for _, p in parts])))
    return submix_step(a, b, torch.log(torch.tensor(h0)), ALPHA, beta, tol=1e-13)


@pytest.mark.parametrize(
    ("k", "v", "beta", "similar", "seed"),
    [
        (1, 3, 0.1, True, 0),
        (2, 3, 0.1, False, 1),
        (3, 4, 0.5, True, 2),
        (4, 5, 0.05, False, 3),
        (5, 3, 1.0, False, 4),
        (3, 6, 0.01, True, 5),
    ],
)
def test_leakage_equals_exact_divergence_without_each_part(k, v, beta, similar, seed):
    rng = np.random.default_rng(seed)
    h0 = random_pmf(rng, v, 3.0)
    parts = make_parts(rng, k, v, similar)
    out = step(parts, h0, beta)
    released = out.log_probs.exp().numpy()
    np.testing.assert_allclose(released, submix_output(parts, h0, ALPHA, beta), rtol=1e-12)
    for i in range(k):
        without = submix_output(parts[:i] + parts[i + 1 :], h0, ALPHA, beta)
        exact = sym(released, without, ALPHA)
        assert float(out.leakage[i]) >= exact * (1 - 1e-9) - 1e-15
        assert float(out.leakage[i]) == pytest.approx(exact, rel=1e-6, abs=1e-12)


def test_lambda_is_the_largest_within_beta():
    rng = np.random.default_rng(7)
    h0 = random_pmf(rng, 5, 2.0)
    a, b = random_pmf(rng, 5, 0.2), random_pmf(rng, 5, 0.2)
    beta = 0.05
    [lam] = submix_lambdas(
        torch.log(torch.tensor(np.array([a]))),
        torch.log(torch.tensor(np.array([b]))),
        torch.log(torch.tensor(h0)),
        ALPHA,
        beta,
        tol=1e-12,
    ).numpy()
    assert 0 < lam < 1
    mix = lambda t: (t * a + (1 - t) * h0, t * b + (1 - t) * h0)  # noqa: E731
    assert renyi(*mix(lam), ALPHA) <= beta * (1 + 1e-9)
    assert renyi(*mix(lam + 1e-6), ALPHA) > beta


def buggy_leakage(parts, h0, beta):
    """The reference bug: the aggregate 'without part i' keeps λ* and ignores that
    removing part i changes the mixing weight (uses λ* instead of λ_{−i})."""
    out = step(parts, h0, beta)
    h = out.log_probs.exp().numpy()
    k = len(parts)
    hs = [(a + b) / 2 for a, b in parts]
    leaks = []
    for i in range(k):
        rest = sum(hs[j] for j in range(k) if j != i) / (k - 1)
        h_minus = out.lambda_star * rest + (1 - out.lambda_star) * h0
        leaks.append(sym(h, h_minus, ALPHA))
    return leaks


def test_leakage_ignoring_the_removed_part_understates():
    """One memorising part drags λ* down (its halves disagree, λ ≈ 0); the calm parts sit
    far from h₀ (λ = 1). Removing the loud part lifts the weight to λ_{−i} = 1, moving the
    output by ~5/9 (h₀ − rest); the bug keeps λ* and sees only ~2/9 of it."""
    h0 = np.array([0.45, 0.05, 0.05, 0.45])
    calm_p = np.array([0.02, 0.48, 0.48, 0.02])
    calm = [(calm_p, calm_p), (calm_p, calm_p)]
    loud = (np.array([0.87, 0.05, 0.05, 0.03]), np.array([0.03, 0.05, 0.05, 0.87]))
    parts = [*calm, loud]
    out = step(parts, h0, 0.05)
    assert out.lambdas[2] < 0.2 and out.lambdas[0] == 1.0
    exact = sym(out.log_probs.exp().numpy(), submix_output(calm, h0, ALPHA, 0.05), ALPHA)
    assert float(out.leakage[2]) == pytest.approx(exact, rel=1e-6)
    assert buggy_leakage(parts, h0, 0.05)[2] < 0.5 * exact
