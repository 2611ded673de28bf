"""Smooth-sensitivity release of PATE's data-dependent RDP, checked against an
independent computation of Papernot et al. 2018's analysis (written here from the paper's
formulas, in their erfc form), against brute-force enumeration of every histogram of a tiny
ensemble, and against the exact Rényi divergence of the GNSS mechanism's worst pairs (which
shows the paper's Theorem 23 too small near its order limit)."""

from __future__ import annotations

import itertools
import math
from collections import deque
from dataclasses import astuple

import numpy as np
import pytest
from scipy.special import erfc, erfcinv

from privlm.accounting import SmoothRelease, confident_gnmax_curve, release_data_dependent_rdp
from privlm.accounting.analysis.gnmax import log_q_gnmax, threshold_rdp_at_max
from privlm.accounting.analysis.pate_smooth import (
    gnmax_cost,
    gnmax_local_sensitivity,
    gnss_rdp,
    gnss_rdp_theorem_23,
    log_q_step_bounds,
    smooth_sensitivity,
    threshold_local_sensitivity,
)
from privlm.errors import AccountingError

pytestmark = pytest.mark.fast

# -- an independent computation of PATE 2018's analysis (paper's formulas, erfc form) ---------


def paper_q(votes, sigma):
    """Proposition 7: q̃ = Σ_{j≠j*} ½·erfc((n_{j*} − n_j)/(2σ)), capped at 1."""
    v = np.asarray(votes, float)
    top = int(np.argmax(v))
    return min(
        1.0, sum(0.5 * erfc((v[top] - v[j]) / (2 * sigma)) for j in range(len(v)) if j != top)
    )


def paper_bu(q, sigma, m):
    return min(1.0, (m - 1) / 2 * erfc(erfcinv(2 * q / (m - 1)) - 1 / sigma))


def paper_bl(q, sigma, m):
    return (m - 1) / 2 * erfc(erfcinv(2 * q / (m - 1)) + 1 / sigma)


def paper_gnmax_rdp(q, sigma, lam):
    """Theorem 6 where its conditions hold (else the data-independent λ/σ²), and the minimum
    of the two, as privlm states it."""
    ind = lam / sigma**2
    mu2 = sigma * math.sqrt(math.log(1 / q))
    mu1 = mu2 + 1
    e1, e2 = mu1 / sigma**2, mu2 / sigma**2
    ok = (
        mu2 > 1
        and lam <= mu1
        and q * math.exp(e2) < 1
        and q <= math.exp((mu2 - 1) * e2) / (mu1 / (mu1 - 1) * mu2 / (mu2 - 1)) ** mu2
    )
    if not ok:
        return ind
    a = (1 - q) / (1 - (q * math.exp(e2)) ** ((mu2 - 1) / mu2))
    b = math.exp(e1) / q ** (1 / (mu1 - 1))
    dep = math.log((1 - q) * a ** (lam - 1) + q * b ** (lam - 1)) / (lam - 1)
    return max(0.0, min(ind, dep))


def paper_gnss(beta, sigma, lam):
    """Theorem 23."""
    return lam * math.exp(2 * beta) / sigma**2 + (
        beta * lam - 0.5 * math.log(1 - 2 * lam * beta)
    ) / (lam - 1)


HISTOGRAMS = [[92, 5, 3], [80, 15, 5], [70, 30, 0], [99, 1, 0], [60, 25, 15]]


@pytest.mark.parametrize("votes", HISTOGRAMS)
def test_one_move_bounds_match_the_papers(votes):
    sigma, m = 5.0, 3
    q = paper_q(votes, sigma)
    low, high = log_q_step_bounds(log_q_gnmax(votes, sigma), sigma, m)
    assert math.exp(log_q_gnmax(votes, sigma)) == pytest.approx(q, rel=1e-9)
    assert math.exp(high) == pytest.approx(paper_bu(q, sigma, m), rel=1e-7)
    assert math.exp(low) == pytest.approx(paper_bl(q, sigma, m), rel=1e-7)


@pytest.mark.parametrize("votes", HISTOGRAMS)
def test_local_sensitivity_at_distance_zero_is_algorithm_3(votes):
    """LS(0) = max(β(bu(q)) − β(q), β(q) − β(bl(q))): PATE 2018's Algorithm 3 outside its
    plateau, computed here with the paper's own formulas."""
    sigma, lam, m = 5.0, 8.0, 3
    q = paper_q(votes, sigma)
    beta = paper_gnmax_rdp(q, sigma, lam)
    want = max(
        paper_gnmax_rdp(paper_bu(q, sigma, m), sigma, lam) - beta,
        beta - paper_gnmax_rdp(paper_bl(q, sigma, m), sigma, lam),
    )
    got = gnmax_local_sensitivity(votes, sigma, lam, 3)
    assert got[0] == pytest.approx(want, rel=1e-6, abs=1e-12)
    assert gnmax_cost(math.log(q), sigma, lam) == pytest.approx(beta, rel=1e-9)
    assert np.all(np.diff(got) >= -1e-12)  # farther away, never smaller


def test_the_data_dependent_bound_is_in_play_for_these_histograms():
    """Not vacuous: the confident histograms cost far less than the data-independent λ/σ²."""
    costs = [paper_gnmax_rdp(paper_q(v, 5.0), 5.0, 8.0) for v in HISTOGRAMS]
    assert min(costs) < 0.05 * 8.0 / 25


def gaussian_renyi(mu1, s1, mu2, s2, lam):
    """D_λ(N(μ1, s1²) ‖ N(μ2, s2²)), closed form (Gil, Alajaji and Linder 2013)."""
    var = lam * s2**2 + (1 - lam) * s1**2
    if var <= 0:
        return math.inf
    return (
        math.log(s2 / s1)
        + math.log(s2**2 / var) / (2 * (lam - 1))
        + lam * (mu1 - mu2) ** 2 / (2 * var)
    )


def worst_gnss_pair(lam, beta, sigma, points=401):
    """The largest exact divergence, both directions, over legal neighbours: SS(D) = 1,
    SS(D') = e^b with |b| ≤ β, |f(D) − f(D')| ≤ min(SS(D), SS(D'))."""
    worst = 0.0
    for b in np.linspace(-beta, beta, points):
        shift = min(1.0, math.exp(b))
        here, there = (0.0, sigma), (shift, math.exp(b) * sigma)
        worst = max(worst, gaussian_renyi(*here, *there, lam), gaussian_renyi(*there, *here, lam))
    return worst


CASES = [(20.0, 0.02, 20.0), (4.0, 0.1, 2.0), (8.0, 0.05, 5.0), (2.0, 0.2, 1.0), (10.0, 0.049, 1.0)]


@pytest.mark.proof
@pytest.mark.parametrize("lam,beta,sigma", CASES)
def test_gnss_is_the_exact_worst_pair(lam, beta, sigma):
    """privlm's bound is at least, and (its maximum sits at b = ±β) equal to, the exact
    divergence of the worst legal pair of neighbours."""
    exact = worst_gnss_pair(lam, beta, sigma)
    ours = gnss_rdp(beta, sigma, [lam])[0]
    assert ours >= exact - 1e-12
    assert ours == pytest.approx(exact, rel=1e-9)


@pytest.mark.proof
def test_theorem_23_understates_the_worst_pair_near_its_order_limit():
    """Why privlm does not charge PATE 2018's Theorem 23 (docs/sharp_edges.md): at the
    defaults a legal pair's exact divergence exceeds it; far from the limit it is sound."""
    for lam, beta, sigma in [(20.0, 0.02, 20.0), astuple(SmoothRelease())]:
        theorem = gnss_rdp_theorem_23(beta, sigma, [lam])[0]
        assert theorem == pytest.approx(paper_gnss(beta, sigma, lam))
        assert theorem < 0.9 * worst_gnss_pair(lam, beta, sigma)
    assert gnss_rdp_theorem_23(0.1, 2.0, [4.0])[0] >= worst_gnss_pair(4.0, 0.1, 2.0)


def test_gnss_is_infinite_beyond_its_order_limit():
    assert gnss_rdp(0.02, 20.0, [25.6])[0] == math.inf
    assert math.isfinite(gnss_rdp(0.02, 20.0, [25.4])[0])


def test_a_release_order_outside_theorem_23_is_refused():
    with pytest.raises(AccountingError, match="lower β or λ"):
        SmoothRelease(order=26.0, beta=0.02)


# -- brute force: every histogram of 6 teachers over 3 classes --------------------------------

TEACHERS, CLASSES = 6, 3
ALL = [h for h in itertools.product(range(TEACHERS + 1), repeat=CLASSES) if sum(h) <= TEACHERS]


def moves(h):
    """Neighbours: one teacher's vote added, removed (abstains) or moved to another class."""
    for i in range(CLASSES):
        up = list(h)
        up[i] += 1
        if sum(up) <= TEACHERS:
            yield tuple(up)
        if h[i] > 0:
            down = list(h)
            down[i] -= 1
            yield tuple(down)
            for j in range(CLASSES):
                if j != i:
                    moved = list(down)
                    moved[j] += 1
                    yield tuple(moved)


def distances_from(h):
    seen, todo = {h: 0}, deque([h])
    while todo:
        x = todo.popleft()
        for y in moves(x):
            if y not in seen:
                seen[y] = seen[x] + 1
                todo.append(y)
    return seen


DISTANCES = {h: distances_from(h) for h in ALL}


def true_local_sensitivity(cost, h, d):
    """max over h' within d of h, over h'' a neighbour of h', of |cost(h'') − cost(h')|."""
    return max(
        abs(cost[y] - cost[x]) for x, dx in DISTANCES[h].items() if dx <= d for y in moves(x)
    )


@pytest.mark.parametrize("sigma,lam", [(0.5, 2.0), (1.0, 3.0), (1.0, 2.0)])
def test_gnmax_bound_is_above_the_true_local_sensitivity_everywhere(sigma, lam):
    cost = {
        h: gnmax_cost(log_q_gnmax(h, sigma), sigma, lam) if sum(h) else lam / sigma**2 for h in ALL
    }
    assert len({round(c, 9) for c in cost.values()}) > 3  # the data-dependent bound is in play
    for h in ALL:
        if sum(h) == 0:
            continue  # no vote at all: GNMax's cost is its data-independent bound
        ours = gnmax_local_sensitivity(h, sigma, lam, TEACHERS + 1)
        for d in range(TEACHERS + 1):
            assert ours[d] >= true_local_sensitivity(cost, h, d) - 1e-12, (h, d)


def test_every_neighbour_of_q_lies_within_one_move_bounds():
    for sigma in (0.5, 1.0, 2.0):
        for h in ALL:
            if sum(h) == 0:
                continue
            low, high = log_q_step_bounds(log_q_gnmax(h, sigma), sigma, CLASSES)
            for g in moves(h):
                if sum(g):
                    assert low - 1e-9 <= log_q_gnmax(g, sigma) <= high + 1e-9


@pytest.mark.parametrize("threshold,sigma1,lam", [(4.0, 1.0, 3.0), (2.0, 0.7, 5.0)])
def test_threshold_bound_is_above_the_true_local_sensitivity_and_often_equal(
    threshold, sigma1, lam
):
    cost = {h: threshold_rdp_at_max(max(h), threshold, sigma1, [lam])[0] for h in ALL}
    equal = 0
    for h in ALL:
        ours = threshold_local_sensitivity(h, TEACHERS, threshold, sigma1, lam, TEACHERS + 1)
        for d in range(TEACHERS + 1):
            true = true_local_sensitivity(cost, h, d)
            assert ours[d] >= true - 1e-12, (h, d)
            equal += bool(abs(ours[d] - true) < 1e-12)
    # not reachable: a tie at the top (3, 3, 0) cannot lose its maximum in one move
    assert equal > 0.6 * len(ALL) * (TEACHERS + 1)


@pytest.mark.parametrize("beta", [0.05, 0.3])
def test_the_smooth_sensitivity_is_beta_smooth(beta):
    """SS(h) ≤ e^β·SS(h') for every neighbouring pair (the property GNSS needs)."""
    sigma, lam, threshold, sigma1 = 1.0, 2.0, 4.0, 1.0
    ceiling = lam / sigma**2 + lam / (2 * sigma1**2)

    def ss(h):
        local = threshold_local_sensitivity(h, TEACHERS, threshold, sigma1, lam, TEACHERS + 1)
        local = local + gnmax_local_sensitivity(h, sigma, lam, TEACHERS + 1)
        return smooth_sensitivity(local, beta, ceiling)

    values = {h: ss(h) for h in ALL if sum(h)}
    for h, s in values.items():
        for g in moves(h):
            if g in values:
                assert s <= math.exp(beta) * values[g] + 1e-12


# -- the release -------------------------------------------------------------------------------


def test_release_without_noise_is_the_data_dependent_sum_and_noise_scales_with_ss():
    hist = np.array([[92, 5, 3], [40, 35, 25], [99, 1, 0]])
    answered = [True, False, True]
    rel = SmoothRelease(order=8.0, beta=0.05, sigma=10.0)
    exact = sum(
        confident_gnmax_curve(v, 60, 20.0, 5.0, a, 100).at([8.0])[0]
        for v, a in zip(hist, answered, strict=True)
    )
    zero = release_data_dependent_rdp(hist, answered, 100, 60, 20.0, 5.0, rel, 0.0)
    one = release_data_dependent_rdp(hist, answered, 100, 60, 20.0, 5.0, rel, 1.0)
    assert zero.noisy_rdp == pytest.approx(exact, rel=1e-9)
    assert one.noisy_rdp > zero.noisy_rdp  # σ_s·SS > 0
    assert zero.release_rdp == pytest.approx(gnss_rdp(0.05, 10.0, [8.0])[0])
    assert zero.charged_rdp == pytest.approx(exact + zero.release_rdp)
    assert zero.curve().orders == (8.0,)
    low = release_data_dependent_rdp(hist, answered, 100, 60, 20.0, 5.0, rel, -1e6)
    assert low.charged_rdp == pytest.approx(low.release_rdp)  # a negative estimate counts as 0
