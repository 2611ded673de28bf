"""PATE's GNMax and threshold accounting against independent computations: dp-accounting's
Gaussian mechanism, exact Rényi divergences between the output distributions of neighbouring
histograms (numerical integration), and the histogram-versus-label-matrix guard."""

from __future__ import annotations

import itertools
import math

import dp_accounting
import numpy as np
import pytest
from scipy import integrate, stats

from privlm.accounting.analysis.gnmax import (
    confident_gnmax_rdp,
    log_pr_answered,
    log_q_gnmax,
    rdp_gnmax,
    rdp_gnmax_data_independent,
    rdp_threshold,
    vote_histogram,
)
from privlm.errors import AccountingError

pytestmark = pytest.mark.fast

ORDERS = np.array([1.5, 2.0, 3.0, 5.0, 8.0, 16.0, 32.0, 64.0])


def gnmax_distribution(votes, sigma):
    """Pr[argmax_j(n_j + N(0, σ²)) = j], by integrating over the winner's noise."""
    v = np.asarray(votes, dtype=float)
    out = []
    for j in range(len(v)):
        others = np.delete(v, j)

        def f(z, j=j, others=others):
            return stats.norm.pdf(z) * np.prod(stats.norm.cdf((v[j] - others) / sigma + z))

        out.append(integrate.quad(f, -40, 40, epsabs=0, epsrel=1e-12, limit=400)[0])
    p = np.array(out)
    return p / p.sum()


def renyi(p, r, order):
    with np.errstate(divide="ignore"):
        lp, lr = np.log(p), np.log(r)
    keep = p > 0
    return float(np.logaddexp.reduce(order * lp[keep] + (1 - order) * lr[keep])) / (order - 1)


def neighbours(votes):
    """Histograms one teacher's vote away: moved between classes, or to/from 'other'."""
    v = list(votes)
    for a, b in itertools.permutations(range(len(v)), 2):
        if v[a] > 0:
            w = v.copy()
            w[a] -= 1
            w[b] += 1
            yield w
    for a in range(len(v)):
        for d in (-1, 1):
            if v[a] + d >= 0:
                w = v.copy()
                w[a] += d
                yield w


def test_data_independent_gnmax_is_the_gaussian_mechanism_with_sensitivity_root_two():
    sigma = 7.0
    acc = dp_accounting.rdp.RdpAccountant(orders=[2.0, 3.0, 8.0, 32.0])
    acc.compose(dp_accounting.GaussianDpEvent(noise_multiplier=sigma / math.sqrt(2)))
    assert np.allclose(rdp_gnmax_data_independent(sigma, [2.0, 3.0, 8.0, 32.0]), acc._rdp)


@pytest.mark.proof
def test_the_bound_on_q_is_exact_for_two_classes_and_above_the_truth_for_three():
    sigma = 4.0
    p = gnmax_distribution([20, 11], sigma)
    assert math.exp(log_q_gnmax([20, 11], sigma)) == pytest.approx(p[1], rel=1e-6)
    p3 = gnmax_distribution([20, 11, 9], sigma)
    assert math.exp(log_q_gnmax([20, 11, 9], sigma)) >= 1 - p3[0]


@pytest.mark.proof
@pytest.mark.parametrize("votes", [[30, 2], [25, 6, 1], [18, 10, 4], [40, 0, 0, 0], [12, 11]])
def test_data_dependent_gnmax_bound_is_at_least_the_exact_divergence(votes):
    sigma = 4.0
    bound = rdp_gnmax(log_q_gnmax(votes, sigma), sigma, ORDERS)
    p = gnmax_distribution(votes, sigma)
    others = [gnmax_distribution(w, sigma) for w in neighbours(votes)]
    for k, order in enumerate(ORDERS):
        exact = max(renyi(p, r, order) for r in others)
        assert exact <= bound[k] * (1 + 1e-6) + 1e-12, (votes, order, exact, bound[k])


def test_high_consensus_costs_far_less_than_the_data_independent_bound():
    sigma = 40.0
    dep = rdp_gnmax(log_q_gnmax([380, 20], sigma), sigma, ORDERS)
    indep = rdp_gnmax_data_independent(sigma, ORDERS)
    assert np.all(dep <= indep) and dep[1] < indep[1] / 10
    # a tie gets nothing from the data: the bound falls back to λ/σ²
    tie = rdp_gnmax(log_q_gnmax([200, 200], sigma), sigma, ORDERS)
    assert np.allclose(tie, indep)


@pytest.mark.proof
@pytest.mark.parametrize("votes", [[380, 20], [150, 150, 100], [60, 0]])
def test_threshold_cost_is_the_exact_bernoulli_divergence(votes):
    t, s1 = 300.0, 150.0
    got = rdp_threshold(votes, t, s1, ORDERS)
    m = max(votes)

    def bits(x):
        p = stats.norm.sf((t - x) / s1)
        return np.array([p, 1 - p])

    for k, order in enumerate(ORDERS):
        exact = max(
            renyi(bits(x), bits(y), order)
            for x, y in [(m, m - 1), (m - 1, m), (m, m + 1), (m + 1, m)]
            if min(x, y) >= 0
        )
        assert got[k] == pytest.approx(min(exact, order / (2 * s1**2)), rel=1e-6, abs=1e-15)
    assert math.exp(log_pr_answered(votes, t, s1)) == pytest.approx(stats.norm.sf((t - m) / s1))


def test_an_unanswered_query_costs_the_threshold_only():
    votes, t, s1, s2 = [200, 190], 300.0, 50.0, 40.0
    both = confident_gnmax_rdp(votes, t, s1, s2, ORDERS, answered=True)
    only = confident_gnmax_rdp(votes, t, s1, s2, ORDERS, answered=False)
    assert np.allclose(only, rdp_threshold(votes, t, s1, ORDERS))
    assert np.all(both > only)


def test_a_per_teacher_label_matrix_is_refused():
    labels = np.random.default_rng(0).integers(0, 2, size=(1, 400))
    with pytest.raises(AccountingError, match="not an array of shape"):
        vote_histogram(labels)
    with pytest.raises(AccountingError, match="label matrix"):
        log_q_gnmax(labels, 40.0)


def test_a_list_of_labels_is_caught_when_the_class_or_teacher_count_is_known():
    labels = [0, 1, 1, 0, 1]  # five teachers' labels, not counts
    vote_histogram([3, 2], teachers=5, classes=2)
    with pytest.raises(AccountingError, match="2 classes"):
        vote_histogram(labels, classes=2)
    with pytest.raises(AccountingError, match="only 3 teachers"):
        vote_histogram([4, 2], teachers=3)


def test_why_the_guard_matters_labels_read_as_counts_understate_epsilon():
    # 400 teachers, 380 for class 0: the label row [0,0,...,1,...] read as "counts" looks
    # like a near-tie of tiny counts, yet it is accounted as if it were strong consensus data
    counts = np.array([380, 20])
    labels = np.array([0] * 380 + [1] * 20)
    honest = rdp_gnmax(log_q_gnmax(counts, 40.0), 40.0, ORDERS)
    assert np.all(honest > 0)
    with pytest.raises(AccountingError):
        vote_histogram(labels[None, :])


def test_bad_inputs():
    with pytest.raises(AccountingError):
        vote_histogram([3])
    with pytest.raises(AccountingError):
        vote_histogram([3, -1])
    with pytest.raises(AccountingError):
        vote_histogram([2.5, 1])
    with pytest.raises(AccountingError):
        rdp_gnmax(-3.0, 0.0, ORDERS)


def test_planning_k_queries_composes_and_converts():
    from privlm.accounting import DEFAULT_ORDERS, plan_gnmax

    plan = plan_gnmax([380, 20], 300, 150, 40, 1e-5, 100)
    a = np.asarray(DEFAULT_ORDERS)
    rdp = 100 * confident_gnmax_rdp([380, 20], 300, 150, 40, a, answered=True)
    # Balle et al. 2020 conversion (PMixED Theorem C.3), written out independently
    eps = rdp + np.log((a - 1) / a) - (np.log(1e-5) + np.log(a)) / (a - 1)
    assert plan.epsilon == pytest.approx(eps.min(), rel=1e-9)
    assert plan.epsilon_unanswered < plan.epsilon
    assert plan.pr_answered == pytest.approx(stats.norm.sf((300 - 380) / 150))


def test_account_gnmax_cli():
    import json

    from typer.testing import CliRunner

    from privlm.cli import app

    args = ["account", "gnmax", "--votes", "380,20", "--threshold", "300",
            "--sigma-threshold", "150", "--sigma", "40", "--delta", "1e-5", "--queries", "10"]  # fmt: skip
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["queries"] == 10 and out["votes"] == [380, 20] and 0 < out["epsilon"] < 1
    bad = CliRunner().invoke(app, ["account", "gnmax", "--votes", "0.5,x", *args[4:]])
    assert bad.exit_code == 2
