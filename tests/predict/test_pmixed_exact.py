"""PMixED's guarantee, checked by exact Rényi divergences on tiny vocabularies and ensembles.

For neighbouring ensembles (one model added or removed), the order-α divergence between the
released distributions, both directions, must never exceed the per-query cost charged.
Subsets are enumerated, so the check covers the Poisson subsampling randomness.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from privlm.accounting.analysis import pmixed as pm
from privlm.predict.divergence import renyi_divergence
from privlm.predict.mollifier import pmixed_lambdas
from tests.predict.exact import (
    pmixed_output,
    pmixed_poisson_output,
    pmixed_with_replacement_output,
    random_pmf,
    renyi,
    sym,
)

pytestmark = [pytest.mark.fast, pytest.mark.proof]  # exact enumerations

ALPHA = 3


def adversarial_case():
    """A rare token under p₀; model 0 bets on it, model 1 avoids it."""
    p0 = np.array([0.5, 0.5 - 1e-6, 1e-6])
    p1 = np.array([1e-4, 1e-4, 1 - 2e-4])
    p2 = np.array([0.6, 0.4 - 1e-12, 1e-12])
    return p0, [p1, p2]


def test_each_mollified_model_stays_inside_the_ball():
    rng = np.random.default_rng(0)
    p0 = random_pmf(rng, 5, 1.0)
    models = [random_pmf(rng, 5, 0.1) for _ in range(4)]
    radius = 0.05
    lam = pmixed_lambdas(
        torch.log(torch.tensor(np.array(models))), torch.log(torch.tensor(p0)), 2 * ALPHA, radius
    )
    for lam_i, p in zip(lam.numpy(), models, strict=True):
        mixed = lam_i * p + (1 - lam_i) * p0
        assert sym(mixed, p0, 2 * ALPHA) <= radius * (1 + 1e-9)
        if lam_i < 1:  # the largest such λ, to the tolerance
            bigger = min(lam_i + 2e-4, 1.0) * p + (1 - min(lam_i + 2e-4, 1.0)) * p0
            assert sym(bigger, p0, 2 * ALPHA) > radius


CASES = [
    (v, n, eps, q, seed)
    for seed, (v, n, eps, q) in enumerate(
        [
            (3, 1, 0.5, 0.3),
            (3, 2, 0.5, 0.5),
            (4, 3, 0.1, 0.2),
            (3, 3, 2.0, 0.9),
            (2, 2, 5.0, 1.0),
            (4, 2, 0.02, 1.0),
            (3, 4, 1.0, 0.05),
            (5, 3, 0.3, 0.6),
        ]
    )
]


@pytest.mark.parametrize(("vocab", "n", "eps", "q", "seed"), CASES)
def test_exact_divergence_within_charged_cost_over_subsampling(vocab, n, eps, q, seed):
    rng = np.random.default_rng(seed)
    p0 = random_pmf(rng, vocab, 2.0)
    models = [random_pmf(rng, vocab, 0.2) for _ in range(n)]
    radius = pm.solve_radius(eps, ALPHA, n, q, bound="expansion")
    charged = pm.query_rdp(radius, ALPHA, n, q, "expansion")
    assert charged <= eps
    full = pmixed_poisson_output(models, p0, ALPHA, radius, q)
    for i in range(n):
        without = pmixed_poisson_output(models[:i] + models[i + 1 :], p0, ALPHA, radius, q)
        assert sym(full, without, ALPHA) <= charged * (1 + 1e-9)


@pytest.mark.parametrize("q", [1.0, 0.5, 0.1])
def test_adversarial_case_is_within_budget(q):
    p0, models = adversarial_case()
    radius = pm.solve_radius(0.5, ALPHA, 2, q, bound="expansion")
    charged = pm.query_rdp(radius, ALPHA, 2, q, "expansion")
    full = pmixed_poisson_output(models, p0, ALPHA, radius, q)
    for i in range(2):
        without = pmixed_poisson_output(models[:i] + models[i + 1 :], p0, ALPHA, radius, q)
        assert sym(full, without, ALPHA) <= charged * (1 + 1e-9)


def test_the_papers_theorem51_bound_can_be_exceeded():
    """Why privlm enforces the ball at order 2α: with the paper's order-α ball and Eq. 6's β,
    removing one model moves the output ~10× the per-query budget."""
    p0, models = adversarial_case()
    eps = 0.5
    beta = pm.paper_theorem51_beta(eps, ALPHA, 2)
    lam = pmixed_lambdas(
        torch.log(torch.tensor(np.array(models))),
        torch.log(torch.tensor(p0)),
        ALPHA,
        ALPHA * beta,
        tol=1e-13,
    ).numpy()
    mixed = [lam_i * p + (1 - lam_i) * p0 for lam_i, p in zip(lam, models, strict=True)]
    for m in mixed:  # both inside the paper's ball ...
        assert sym(m, p0, ALPHA) <= ALPHA * beta * (1 + 1e-9)
    full = (mixed[0] + mixed[1]) / 2
    assert renyi(full, mixed[1], ALPHA) > 5 * eps  # ... yet far over the budget


def test_sampling_with_replacement_breaks_the_bound():
    """Poisson amplification (Theorem C.4) does not apply to a fixed number of draws with
    replacement: the exact divergence exceeds the cost the Poisson analysis charges."""
    p0, models = adversarial_case()
    q = 0.1
    radius = pm.solve_radius(0.5, ALPHA, 2, q, bound="expansion")
    charged = pm.query_rdp(radius, ALPHA, 2, q, "expansion")
    poisson_full = pmixed_poisson_output(models, p0, ALPHA, radius, q)
    poisson_without = pmixed_poisson_output(models[1:], p0, ALPHA, radius, q)
    assert sym(poisson_full, poisson_without, ALPHA) <= charged
    wr_full = pmixed_with_replacement_output(models, p0, ALPHA, radius, q)
    wr_without = pmixed_with_replacement_output(models[1:], p0, ALPHA, radius, q)
    assert sym(wr_full, wr_without, ALPHA) > charged


def test_no_subsampling_matches_single_output():
    rng = np.random.default_rng(3)
    p0 = random_pmf(rng, 4, 1.0)
    models = [random_pmf(rng, 4, 0.3) for _ in range(3)]
    np.testing.assert_allclose(
        pmixed_poisson_output(models, p0, ALPHA, 0.1, 1.0), pmixed_output(models, p0, ALPHA, 0.1)
    )


def test_torch_divergence_matches_high_precision():
    rng = np.random.default_rng(4)
    p, q = random_pmf(rng, 6, 0.3), random_pmf(rng, 6, 0.3)
    for a in (1.5, 2.0, 3.0, 6.0):
        ours = float(renyi_divergence(torch.log(torch.tensor(p)), torch.log(torch.tensor(q)), a))
        assert ours == pytest.approx(renyi(p, q, a), rel=1e-10)
