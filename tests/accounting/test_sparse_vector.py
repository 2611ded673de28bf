"""The sparse-vector accounting of screened PMixED against independent computations
(docs/sharp_edges.md, "Screened PMixED"):
- the score's sensitivity under replacement of one member, by an adversarial search over
  tiny ensembles: never above 1/N, and 1/N is reached;
- the instance's RDP against its closed forms (ε′-DP, and ε′²/2-zCDP), and its inverse;
- AboveThreshold's outcome distribution, computed exactly by integrating over the
  threshold noise, on neighbouring score sequences found by an adversarial search: its
  privacy loss never exceeds ε′, nor its Rényi divergences the charged RDP;
- the whole transcript of a tiny screened deployment (vocabulary 2, N = 2, three queries;
  above/below pattern and tokens, the paid tokens from PMixED enumerated over every Poisson
  subset): its exact Rényi divergence, one member replaced, at most what is charged, for
  any number of free tokens.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import integrate
from scipy.optimize import minimize

from privlm.accounting.analysis import pmixed as pm
from privlm.accounting.analysis import sparse_vector as sv
from privlm.errors import AccountingError
from tests.predict.exact import pmixed_poisson_output, random_pmf, renyi

pytestmark = pytest.mark.fast


def _simplex(x: np.ndarray, v: int) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


# -- the score and its sensitivity -------------------------------------------------------------


def test_the_score_is_the_tv_distance_of_the_average_from_the_public_model():
    members = np.array([[0.9, 0.1], [0.5, 0.5]])
    public = np.array([0.2, 0.8])
    assert sv.screening_score(members, public) == pytest.approx(0.5)  # |0.7 − 0.2|
    assert sv.screening_score(members[None], public[None]).shape == (1,)
    assert sv.screening_score(np.array([public, public]), public) == 0.0


@pytest.mark.proof
@pytest.mark.parametrize("n", [1, 2, 3, 5])
@pytest.mark.parametrize("v", [2, 3, 5])
def test_an_adversarial_search_finds_no_score_change_above_one_over_n(n, v):
    rng = np.random.default_rng(n * 10 + v)
    worst = 0.0
    for _ in range(12):
        start = rng.normal(size=(n + 2) * v) * 3

        def negative_change(x: np.ndarray) -> float:
            rows = [_simplex(x[i * v : (i + 1) * v], v) for i in range(n + 2)]
            public, members, replacement = rows[0], np.array(rows[1 : n + 1]), rows[n + 1]
            other = members.copy()
            other[0] = replacement
            return -abs(
                float(sv.screening_score(members, public) - sv.screening_score(other, public))
            )

        res = minimize(negative_change, start, method="Nelder-Mead",
                       options={"maxfev": 3000, "xatol": 1e-9, "fatol": 1e-12})  # fmt: skip
        worst = max(worst, -res.fun)
    assert worst <= sv.score_sensitivity(n) + 1e-12
    assert worst >= 0.9 * sv.score_sensitivity(n)  # the search gets near the bound


def test_the_sensitivity_is_reached_exactly():
    n = 4
    public = np.array([1.0, 0.0])
    members = np.tile(public, (n, 1))
    other = members.copy()
    other[0] = [0.0, 1.0]
    change = sv.screening_score(other, public) - sv.screening_score(members, public)
    assert change == pytest.approx(sv.score_sensitivity(n))


# -- one instance in Rényi DP --------------------------------------------------------------------


def test_the_instance_rdp_is_the_smaller_of_its_two_closed_forms():
    orders = [1.5, 2.0, 3.0, 8.0, 64.0]
    for eps in (0.01, 0.3, 1.0, 4.0):
        got = sv.instance_rdp(eps, orders)
        assert np.allclose(got, [min(eps, a * eps * eps / 2) for a in orders])
    with pytest.raises(AccountingError):
        sv.instance_rdp(0.0, orders)
    with pytest.raises(AccountingError):
        sv.instance_rdp(1.0, [1.0])


@pytest.mark.parametrize("alpha", [2, 3, 8])
@pytest.mark.parametrize("budget", [1e-4, 0.01, 0.5, 3.0])
def test_instance_epsilon_for_is_the_largest_that_fits(alpha, budget):
    eps = sv.instance_epsilon_for(budget, alpha)
    assert sv.instance_rdp(eps, [alpha])[0] == pytest.approx(budget, rel=1e-12)
    assert sv.instance_rdp(eps * 1.001, [alpha])[0] > budget


def test_the_noise_scales_are_dwork_and_roths():
    at = sv.AboveThreshold(0.5, 0.1)
    assert (at.threshold_scale, at.query_scale) == pytest.approx((0.4, 0.8))
    with pytest.raises(AccountingError):
        sv.AboveThreshold(0.0, 0.1)


def test_split_budget_gives_each_part_its_share():
    eps, per_query = sv.split_budget(0.9, 10, 3, 0.25)
    assert per_query == pytest.approx(0.9 / 10 * 0.75)
    assert sv.instance_rdp(eps, [3])[0] == pytest.approx(0.9 / 10 * 0.25)
    with pytest.raises(AccountingError):
        sv.split_budget(0.9, 0, 3, 0.25)


# -- AboveThreshold, exactly ---------------------------------------------------------------------


def _laplace_cdf(x: float, b: float) -> float:
    return 0.5 * math.exp(x / b) if x < 0 else 1.0 - 0.5 * math.exp(-x / b)


def _laplace_pdf(x: float, b: float) -> float:
    return math.exp(-abs(x) / b) / (2 * b)


def instance_outcomes(scores, tau: float, at: sv.AboveThreshold) -> list[float]:
    """P(⊤ first at query j) for j = 1..J, then P(⊥ at every query): exact, by integrating
    over the threshold noise ρ (query noises by their CDF)."""
    bt, bq = at.threshold_scale, at.query_scale
    probs = []
    for j in range(len(scores) + 1):

        def integrand(rho: float, j: int = j) -> float:
            value = _laplace_pdf(rho, bt)
            for s in scores[:j]:
                value *= _laplace_cdf(tau + rho - s, bq)  # below
            if j < len(scores):
                value *= 1.0 - _laplace_cdf(tau + rho - scores[j], bq)  # above
            return value

        kinks = sorted({0.0, *(s - tau for s in scores)})
        lo, hi = -60 * bt - 10, 60 * bt + 10
        total, _ = integrate.quad(integrand, lo, hi, points=kinks, limit=400, epsabs=1e-15)
        probs.append(total)
    return probs


def test_the_exact_outcomes_sum_to_one():
    at = sv.AboveThreshold(1.0, 0.25)
    assert sum(instance_outcomes([0.1, 0.6, 0.3], 0.4, at)) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.proof
@pytest.mark.parametrize("length", [1, 2, 4])
def test_an_adversarial_search_finds_no_instance_loss_above_epsilon(length):
    """Neighbouring score sequences (each score moves by at most Δ): the exact outcome
    distributions' worst log-ratio stays within ε′, and their Rényi divergences within the
    instance's RDP."""
    eps, delta_s, tau = 1.0, 0.2, 0.5
    at = sv.AboveThreshold(eps, delta_s)
    rng = np.random.default_rng(length)

    def loss(x: np.ndarray) -> float:
        scores = np.clip(x[:length], 0.0, 1.0)
        moved = np.clip(scores + delta_s * np.tanh(x[length:]), 0.0, 1.0)
        a = instance_outcomes(list(scores), tau, at)
        b = instance_outcomes(list(moved), tau, at)
        return -max(abs(math.log(p / r)) for p, r in zip(a, b, strict=True) if p > 0 and r > 0)

    worst = 0.0
    for _ in range(4):
        res = minimize(loss, rng.normal(0.5, 0.5, 2 * length), method="Nelder-Mead",
                       options={"maxfev": 200 if length > 2 else 400})  # fmt: skip
        worst = max(worst, -res.fun)
    assert worst <= eps + 1e-9
    assert worst >= 0.15 * eps  # the search does move the outcomes
    scores = [0.45, 0.55, 0.5, 0.6][:length]
    moved = [s + delta_s for s in scores]
    a, b = instance_outcomes(scores, tau, at), instance_outcomes(moved, tau, at)
    for k in (2, 3, 8):
        charged = float(sv.instance_rdp(eps, [k])[0])
        assert max(renyi(a, b, k), renyi(b, a, k)) <= charged + 1e-12


# -- a whole screened deployment, exactly ----------------------------------------------------


ALPHA, RADIUS, Q, TAU = 3, 0.3, 0.5, 0.05


def _paid(members, p0):
    return pmixed_poisson_output(list(members), p0, ALPHA, RADIUS, Q)


def transcripts(members, public, paid_budget: int, steps: int, eps: float):
    """Every transcript's exact probability: per step, while paid tokens are left, the test
    (⊤: a PMixED token, ⊥: a public token) within the current instance; once spent, public
    tokens only. ``members[i][ctx]`` and ``public[ctx]`` are the next-token pmfs after the
    context ``ctx`` (the tokens so far, a tuple)."""
    n = len(members)
    at = sv.AboveThreshold(eps, sv.score_sensitivity(n))
    out: dict[tuple, float] = {}

    def walk(ctx: tuple, pattern: tuple, left: int, pending: list, weight: float) -> None:
        """``pending``: the (score, outcome) of the open instance's steps so far."""
        if len(ctx) == steps:
            p = weight * _instance_probability(pending, at) if pending else weight
            out[(ctx, pattern)] = out.get((ctx, pattern), 0.0) + p
            return
        p0 = public[ctx]
        if left == 0:
            for t in range(len(p0)):
                walk((*ctx, t), (*pattern, "public"), 0, pending, weight * p0[t])
            return
        score = float(sv.screening_score(np.array([m[ctx] for m in members]), p0))
        for t in range(len(p0)):  # below: a free public token, the instance goes on
            walk((*ctx, t), (*pattern, "below"), left, [*pending, (score, False)],
                 weight * p0[t])  # fmt: skip
        paid = _paid([m[ctx] for m in members], p0)
        closed = _instance_probability([*pending, (score, True)], at)
        for t in range(len(p0)):  # above: a paid token; the instance closes, a new one opens
            walk((*ctx, t), (*pattern, "above"), left - 1, [], weight * closed * paid[t])

    walk((), (), paid_budget, [], 1.0)
    return out


def _instance_probability(steps, at: sv.AboveThreshold) -> float:
    """P(the outcomes ``steps`` [(score, above?)]) of one instance, exactly (over ρ)."""
    bt, bq = at.threshold_scale, at.query_scale

    def integrand(rho: float) -> float:
        value = _laplace_pdf(rho, bt)
        for s, above in steps:
            below = _laplace_cdf(TAU + rho - s, bq)
            value *= (1.0 - below) if above else below
        return value

    kinks = sorted({0.0, *(s - TAU for s, _ in steps)})
    total, _ = integrate.quad(integrand, -60 * bt - 10, 60 * bt + 10, points=kinks, limit=400,
                              epsabs=1e-16)  # fmt: skip
    return total


def _contexts(steps: int, vocab: int):
    return [c for r in range(steps) for c in itertools.product(range(vocab), repeat=r)]


def _ball(p, p0):
    """A member inside the order-2α ball around p₀ (PMixED mollifies it there anyway)."""
    mix = 0.7 * p + 0.3 * p0
    return mix / mix.sum()


@pytest.mark.parametrize("paid_budget,steps", [(1, 2), (1, 3), (2, 3)])
def test_the_whole_transcript_costs_at_most_what_is_charged(paid_budget, steps):
    vocab, n, eps = 2, 2, 0.8
    rng = np.random.default_rng(paid_budget * 10 + steps)
    charge = {}
    query = pm.query_rdp_curve(RADIUS, ALPHA, n, Q)
    for k in range(2, ALPHA + 1):
        charge[k] = paid_budget * (float(sv.instance_rdp(eps, [k])[0]) + query[float(k)])
    worst = 0.0
    for _ in range(6):
        public = {c: random_pmf(rng, vocab, 0.5) for c in _contexts(steps, vocab)}
        members = [{c: _ball(random_pmf(rng, vocab, 0.3), public[c]) for c in public}
                   for _ in range(n)]  # fmt: skip
        replaced = [{c: _ball(random_pmf(rng, vocab, 0.3), public[c]) for c in public},
                    *members[1:]]  # fmt: skip
        a = transcripts(members, public, paid_budget, steps, eps)
        b = transcripts(replaced, public, paid_budget, steps, eps)
        assert sum(a.values()) == pytest.approx(1.0, abs=1e-8)
        keys = sorted(a)
        pa, pb = [a[key] for key in keys], [b[key] for key in keys]
        for k in range(2, ALPHA + 1):
            ratio = max(renyi(pa, pb, k), renyi(pb, pa, k)) / charge[k]
            worst = max(worst, ratio)
    assert worst <= 1.0


def test_free_tokens_add_nothing_to_the_charge():
    """With one paid token, a third query (free, or public once spent) adds no charge: the
    exact divergence over three queries stays within one instance and one paid query."""
    vocab, n, eps = 2, 2, 0.8
    rng = np.random.default_rng(7)
    public = {c: random_pmf(rng, vocab, 0.5) for c in _contexts(3, vocab)}
    members = [{c: _ball(random_pmf(rng, vocab, 0.3), public[c]) for c in public}
               for _ in range(n)]  # fmt: skip
    replaced = [{c: _ball(random_pmf(rng, vocab, 0.3), public[c]) for c in public}, members[1]]
    query = pm.query_rdp_curve(RADIUS, ALPHA, n, Q)
    one_paid = float(sv.instance_rdp(eps, [2])[0]) + query[2.0]
    a, b = transcripts(members, public, 1, 3, eps), transcripts(replaced, public, 1, 3, eps)
    keys = sorted(a)
    assert renyi([a[k] for k in keys], [b[k] for k in keys], 2) <= one_paid


def test_the_exact_check_catches_a_score_noise_too_small(monkeypatch):
    """The transcript check can fail: with the score's noise 20× too small (a sensitivity
    bug), one query of a far replacement costs more than one instance and one query."""
    monkeypatch.setattr(sv, "score_sensitivity", lambda n: 0.05 / n)
    public = {(): np.array([0.5, 0.5])}
    members = [{(): np.array([0.5, 0.5])}, {(): np.array([0.5, 0.5])}]
    replaced = [{(): np.array([0.999, 0.001])}, members[1]]
    a, b = transcripts(members, public, 1, 1, 0.8), transcripts(replaced, public, 1, 1, 0.8)
    keys = sorted(a)
    query = pm.query_rdp_curve(RADIUS, ALPHA, 2, Q)
    charged = float(sv.instance_rdp(0.8, [2])[0]) + query[2.0]
    assert renyi([a[k] for k in keys], [b[k] for k in keys], 2) > charged
