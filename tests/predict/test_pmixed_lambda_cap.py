"""PMixED with λ capped: the per-unit bound's floor term, checked like the rest of it.

A cap λ_i ≤ λ_max keeps a share 1 − λ_max of p₀ in every mollified member, so every release
is at least γ·p₀ at every token (γ = c + (1 − c)(1 − λ_max), c = (1 − q)^N), and the
binomial expansion's moments can be read against p₀ (radius ρ) instead of against another
member (d* ≈ 2.2ρ): docs/sharp_edges.md, "PMixED per unit", step 6. Checked here against
independent computations:
- the cap and the floor on the mixtures privlm releases, every Poisson subset enumerated;
- exact (40-digit) Rényi divergences of releases, one member replaced, at every order the
  charge reads and both directions, never above the capped charge;
- a hill-climbing search for the worst neighbouring pair under the cap;
- at cap 1 and q = 1 nothing changes (no floor), and the floor never raises a charge;
- the deployment charges the capped curve and records the cap beside each token.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from privlm.accounting import Budget, PrivacyLedger
from privlm.accounting.analysis import pmixed as pm
from privlm.errors import AccountingError
from privlm.predict.pmixed_rule import pmixed_mixture
from tests.predict.exact import pmixed_poisson_output, random_pmf, renyi
from tests.predict.test_pmixed_per_unit import (
    ALPHA,
    DEFAULT_PER_QUERY,
    search,
    worst_ratio_exact,
)

pytestmark = [pytest.mark.fast, pytest.mark.proof]


def test_a_cap_of_one_is_the_papers_rule():
    rng = np.random.default_rng(0)
    p0 = torch.log(torch.from_numpy(random_pmf(rng, 6, 1.0)))
    members = torch.log(torch.from_numpy(np.array([random_pmf(rng, 6, 0.2) for _ in range(4)])))
    plain = pmixed_mixture(members, p0, ALPHA, 0.5)
    capped = pmixed_mixture(members, p0, ALPHA, 0.5, lambda_cap=1.0)
    assert torch.equal(plain.lambdas, capped.lambdas)
    assert torch.equal(plain.log_probs, capped.log_probs)


@pytest.mark.parametrize(("n", "q", "cap"), [(1, 1.0, 0.5), (3, 0.4, 0.3), (4, 1.0, 0.7)])
def test_the_cap_holds_and_every_release_keeps_the_floor(n, q, cap):
    """λ ≤ cap for every member, and the release (every subset enumerated, through privlm's
    mixture code) is at least γ·p₀ at every token."""
    rng = np.random.default_rng(n)
    p0 = random_pmf(rng, 5, 1.0)
    models = [random_pmf(rng, 5, 0.1) for _ in range(n)]
    lam = pmixed_mixture(
        torch.log(torch.from_numpy(np.array(models))), torch.log(torch.from_numpy(p0)),
        ALPHA, 5.0, lambda_cap=cap,
    ).lambdas  # fmt: skip
    assert float(lam.max()) <= cap and float(lam.max()) == pytest.approx(cap)  # it binds here
    release = pmixed_poisson_output(models, p0, ALPHA, 5.0, q, cap)
    gamma = pm.public_floor(n, q, cap)
    assert gamma == pytest.approx((1 - q) ** n + (1 - (1 - q) ** n) * (1 - cap))
    assert np.all(release >= gamma * p0 * (1 - 1e-12))


def test_without_a_cap_at_q_one_there_is_no_floor_and_the_charge_is_unchanged():
    assert pm.public_floor(80, 1.0) == 0.0
    for radius in (0.1, 0.65, 2.0):
        a = pm.replacement_rdp(radius, 3, 80, 1.0, ALPHA)
        b = pm.replacement_rdp(radius, 3, 80, 1.0, ALPHA, lambda_cap=1.0)
        assert a == b
    # 0.650 before step 8 (the figure docs/results.md's earlier q = 1 rows were charged at)
    assert pm.solve_radius(DEFAULT_PER_QUERY, ALPHA, 80, 1.0) == pytest.approx(0.775, abs=5e-4)


@pytest.mark.parametrize("n", [1, 8, 80, 1000])
@pytest.mark.parametrize("q", [0.03, 0.5, 1.0])
def test_a_lower_cap_never_raises_the_charge(n, q):
    for radius in (0.05, 0.5, 3.0):
        charges = [
            pm.replacement_rdp(radius, 3, n, q, ALPHA, lambda_cap=cap)
            for cap in (1.0, 0.8, 0.5, 0.2)
        ]
        assert all(b <= a for a, b in itertools.pairwise(charges))


def test_the_capped_radius_at_the_defaults():
    """ε = 8, δ = 1e-5, T = 1024, α = 3, q = 1: ρ* grows from 0.775 to 0.937 at N = 80 and
    from 1.963 to 3.634 at N = 400 when λ ≤ 0.5 (the figures docs/sharp_edges.md quotes)."""
    solve = pm.solve_radius
    assert solve(DEFAULT_PER_QUERY, ALPHA, 80, 1.0, lambda_cap=0.5) == pytest.approx(
        0.937, abs=5e-4
    )
    assert solve(DEFAULT_PER_QUERY, ALPHA, 400, 1.0) == pytest.approx(1.963, abs=5e-4)
    assert solve(DEFAULT_PER_QUERY, ALPHA, 400, 1.0, lambda_cap=0.5) == pytest.approx(
        3.634, abs=5e-4
    )


def test_a_cap_outside_zero_one_is_refused():
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(AccountingError, match="λ cap"):
            pm.solve_radius(DEFAULT_PER_QUERY, ALPHA, 80, 1.0, lambda_cap=bad)


@pytest.mark.parametrize(
    ("vocab", "n", "eps", "q", "cap", "seed"),
    [(3, 1, 0.5, 1.0, 0.5, 0), (3, 2, 0.5, 0.5, 0.3, 1), (4, 3, 0.1, 1.0, 0.6, 2),
     (3, 3, 2.0, 0.9, 0.2, 3), (2, 2, 5.0, 1.0, 0.5, 4), (3, 4, 1.0, 0.05, 0.4, 5),
     (5, 2, DEFAULT_PER_QUERY, 1.0, 0.5, 6), (4, 6, DEFAULT_PER_QUERY, 1.0, 0.3, 7)],
)  # fmt: skip
def test_exact_divergences_under_the_cap_stay_within_the_capped_charge(vocab, n, eps, q, cap, seed):
    rng = np.random.default_rng(seed)
    p0 = random_pmf(rng, vocab, 2.0)
    models = [random_pmf(rng, vocab, 0.2) for _ in range(n)]
    radius = pm.solve_radius(eps, ALPHA, n, q, lambda_cap=cap)
    assert radius >= pm.solve_radius(eps, ALPHA, n, q)
    for _ in range(3):
        replacement = random_pmf(rng, vocab, 0.2)
        assert worst_ratio_exact(p0, models, replacement, radius, q, cap=cap) <= 1.0 + 1e-9


@pytest.mark.parametrize("n", [1, 2, 5, 10])
@pytest.mark.parametrize(("q", "cap"), [(1.0, 0.5), (1.0, 0.2), (0.1, 0.5)])
def test_an_adversarial_search_under_the_cap_finds_no_ratio_above_one(n, q, cap):
    best, p0, members, replacement, radius = search(
        n, q, starts=2, evaluations=120, seed=10 + n, cap=cap
    )
    assert best <= 1.0
    if n <= 5:  # the best found, confirmed in 40 digits through privlm's own code
        assert worst_ratio_exact(p0, members, replacement, radius, q, cap=cap) <= 1.0 + 1e-9


@pytest.mark.slow
@pytest.mark.parametrize(("n", "cap"), [(2, 0.5), (8, 0.5), (8, 0.2)])
def test_a_longer_search_under_the_cap(n, cap):
    assert search(n, 1.0, starts=6, evaluations=400, seed=200 + n, cap=cap)[0] <= 1.0


def test_a_capped_deployment_charges_the_capped_curve_and_records_the_cap(tmp_path):
    from privlm.predict.pmixed import PMixED, PMixEDConfig

    class Engine:  # the charge path reads only the ensemble's size
        n_adapters = 80

    cfg = PMixEDConfig(lambda_cap=0.5)
    ledger = PrivacyLedger(tmp_path / "l.db", "d", Budget(cfg.epsilon, cfg.delta))
    pmx = PMixED(Engine(), None, ledger, cfg)  # type: ignore[arg-type]
    assert pmx.radius == pytest.approx(
        pm.solve_radius(cfg.per_query_rdp, ALPHA, 80, 1.0, lambda_cap=0.5)
    )
    assert pmx.radius > PMixEDConfig().query_cost(80)[0]
    pmx._charge_one()
    record = ledger.charges()[-1]
    assert record.params["lambda_cap"] == 0.5
    charged = float(ledger.recorded_rdp([record], [float(ALPHA)])[0])
    assert charged == pytest.approx(pm.query_rdp(pmx.radius, ALPHA, 80, 1.0, lambda_cap=0.5))
    assert charged <= cfg.per_query_rdp * (1 + 1e-9)


def test_the_cap_is_what_pays_for_the_larger_radius():
    """The same neighbouring pair, charged at the capped radius: mixed without the cap it
    exceeds the capped charge; with the cap the mechanism applies, it stays far inside. So
    the floor term is load-bearing, and these exact checks can fail."""
    n, q, cap, eps = 3, 0.9, 0.2, 2.0
    rng = np.random.default_rng(5)
    p0 = random_pmf(rng, 3, 2.0)
    models = [random_pmf(rng, 3, 0.2) for _ in range(n)]
    replacement = random_pmf(rng, 3, 0.2)
    radius = pm.solve_radius(eps, ALPHA, n, q, lambda_cap=cap)
    assert radius > 1.5 * pm.solve_radius(eps, ALPHA, n, q)
    curve = pm.query_rdp_curve(radius, ALPHA, n, q, lambda_cap=cap)

    def ratio(mix_cap: float) -> float:
        before = pmixed_poisson_output(models, p0, ALPHA, radius, q, mix_cap)
        after = pmixed_poisson_output([replacement, *models[1:]], p0, ALPHA, radius, q, mix_cap)
        return max(
            max(renyi(before, after, k), renyi(after, before, k)) / curve[float(k)]
            for k in range(2, ALPHA + 1)
        )

    assert ratio(1.0) > 1.05
    assert ratio(cap) < 0.5
