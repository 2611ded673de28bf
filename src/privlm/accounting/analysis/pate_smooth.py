"""Smooth sensitivity of PATE's data-dependent RDP, and its private release (Papernot et al.
2018, *Scalable Private Learning with PATE*, §4 and App. B; Nissim, Raskhodnikova and Smith
2007).

A Confident-GNMax query's data-dependent RDP at order λ is a function of the private votes,
so publishing it raw leaks them. PATE 2018 publishes it through the GNSS mechanism:

    ε̂ = Σ_i cost_i(D) + SS_β(D) · N(0, σ_s²),

where SS_β(D) = max_{d ≥ 0} e^{−βd} · LS(D, d) is a β-smooth upper bound on the local
sensitivity of the sum (LS(D, d): the largest change of the sum between two neighbours, one
of them at distance at most d from D). Its RDP depends on β and σ_s only, not on the data.
PATE 2018's Theorem 23 states it as λ·e^{2β}/σ_s² + (βλ − ½·log(1 − 2λβ))/(λ − 1); that is
below the exact divergence of a legal pair of neighbours near λ ≈ 1/(2β), so privlm charges
the exact worst case instead (``gnss_rdp``).

Neighbouring relation: add or remove one private example. It sits in one teacher, so in
every query at most one vote moves (between classes, or to or from abstaining); "distance d"
is d such moves. A neighbour changes every query's histogram, so the sum's local sensitivity
is at most the sum of the queries' (``sum_local_sensitivities``).

How privlm bounds each query's local sensitivity at distance d (every bound is an upper
bound on the true one; the tests check it by enumerating tiny histograms):

- **Threshold check.** Its cost depends on the votes only through the largest count m, and
  one move changes m by at most 1. With c(m) the exact cost (``threshold_costs``), LS(d) is
  at most the largest |c(m' ± 1) − c(m')| over m' within d of m (equal to it unless a tie at
  the top keeps some m' out of reach).
- **GNMax.** Its cost β(q̃) depends on the votes through q̃ = Σ_{j≠j*} Φ(−g_j/(√2·σ))
  (Proposition 7; g_j the gap to the plurality). One move changes each gap by at most 2, so
  by concavity of t ↦ Φ(Φ⁻¹(t) + √2/σ) (Proposition 12 of PATE 2018) a neighbour's q̃ lies in
  [bl(q̃), bu(q̃)], with (m classes)

      bu(q) = min(1, (m − 1)·Φ(Φ⁻¹(q/(m − 1)) + √2/σ)),   bl(q) = (m − 1)·Φ(Φ⁻¹(q/(m − 1)) − √2/σ).

  Both are increasing, so within distance d, q̃ lies in [bl^d(q̃), bu^d(q̃)]. β is
  non-decreasing in q̃ (condition C5 of App. B.4, checked on a dense grid; where it fails,
  privlm uses the data-independent bound), so on a cell [a, b] of a fixed grid of log q̃ the
  one-move change is at most max(β(bu(b)) − β(a), β(b) − β(bl(a))). LS(0) is Algorithm 3 at
  q̃ itself; LS(d) is the largest cell bound over the cells [bl^d(q̃), bu^d(q̃)] meets. This
  needs C5 but not C6 (PATE 2018's Algorithm 4 walk needs both), and is smooth by
  construction: a neighbour's interval at distance d lies inside this one's at d + 1.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import log_ndtr, ndtri_exp

from privlm.accounting.analysis.gnmax import (
    log_q_gnmax,
    rdp_gnmax,
    rdp_gnmax_data_independent,
    threshold_rdp_at_max,
    vote_histogram,
)
from privlm.errors import AccountingError

GRID_POINTS = 4000  # points of log q̃ in the cell bounds and the C5 check
GRID_FLOOR = -5000.0  # log q̃ below this: one cell, bounded as a whole


def log_q_step_bounds(log_q: float, sigma: float, classes: int) -> tuple[float, float]:
    """(log bl(q̃), log bu(q̃)): where one vote move can take q̃ (module docstring)."""
    if classes < 2:
        raise AccountingError("GNMax needs at least two classes")
    log_k = math.log(classes - 1)
    z = float(ndtri_exp(min(log_q - log_k, -1e-300)))
    shift = math.sqrt(2.0) / sigma
    low = log_k + float(log_ndtr(z - shift))
    high = min(0.0, log_k + float(log_ndtr(z + shift)))
    return low, high


def gnmax_cost(log_q: float, sigma: float, order: float) -> float:
    """β(q̃): the data-dependent RDP of GNMax at one order (``rdp_gnmax``)."""
    return float(rdp_gnmax(log_q, sigma, [order])[0])


@dataclass(frozen=True)
class _CellBounds:
    """GNMax's one-move cost changes bounded cell by cell on a fixed grid of log q̃."""

    grid: NDArray[np.float64]  # log q̃, increasing, from GRID_FLOOR to 0
    cells: NDArray[np.float64]  # cells[0]: below the floor; cells[i + 1]: [grid[i], grid[i+1]]
    monotone: bool  # condition C5 held on the grid


@lru_cache(maxsize=64)
def _cell_bounds(sigma: float, order: float, classes: int) -> _CellBounds:
    """For q̃' in a cell [a, b], by monotonicity of β and of bl, bu:
    β(bu(q̃')) − β(q̃') ≤ β(bu(b)) − β(a) and β(q̃') − β(bl(q̃')) ≤ β(b) − β(bl(a)),
    with β taken as 0 below the floor (β ≥ 0 everywhere)."""
    grid = np.concatenate([-np.geomspace(-GRID_FLOOR, 1e-9, GRID_POINTS), [0.0]])

    def cost(x: float) -> float:
        return gnmax_cost(x, sigma, order) if x >= GRID_FLOOR else 0.0

    here = np.array([cost(float(x)) for x in grid])
    steps = [log_q_step_bounds(float(x), sigma, classes) for x in grid]
    up = np.array([cost(high) for _, high in steps])
    down = np.array([cost(low) for low, _ in steps])
    inside = np.maximum(up[1:] - here[:-1], here[1:] - down[:-1])
    below = max(up[0], here[0])  # q̃' under the floor: β(q̃') ≥ 0, β(bu(q̃')) ≤ β(bu(floor))
    cells = np.clip(np.concatenate([[below], inside]), 0.0, None)
    return _CellBounds(grid, cells, bool(np.all(np.diff(here) >= -1e-12)))


def gnmax_cost_is_monotone(sigma: float, order: float, classes: int = 2) -> bool:
    """Condition C5 (App. B.4 of PATE 2018), checked numerically: β is non-decreasing in q̃
    on a dense grid of log q̃ (PATE 2018 checks it numerically too)."""
    return _cell_bounds(float(sigma), float(order), int(classes)).monotone


def gnmax_local_sensitivity(
    votes: ArrayLike, sigma: float, order: float, distances: int
) -> NDArray[np.float64]:
    """LS(d) of GNMax's data-dependent RDP at ``order``, for d = 0 .. distances − 1."""
    v = vote_histogram(votes)
    return np.array(
        _gnmax_local_sensitivity(
            log_q_gnmax(v, sigma), v.size, float(sigma), float(order), distances
        )
    )


@lru_cache(maxsize=4096)
def _gnmax_local_sensitivity(
    log_q: float, classes: int, sigma: float, order: float, distances: int
) -> tuple[float, ...]:
    """Depends on the votes through log q̃ only: cached, as PATE runs repeat histograms.

    LS(0) is Algorithm 3 at q̃ itself. For d ≥ 1, a point within distance d − 1 has q̃' in
    [bl^{d−1}(q̃), bu^{d−1}(q̃)]; LS(d) is the largest cell bound over the cells of
    [bl^d(q̃), bu^d(q̃)], which covers those points (cell 0: everything below the floor).
    A neighbour's value at d is then at most this one's at d + 1 (β-smoothness)."""
    ceiling = float(rdp_gnmax_data_independent(sigma, [order])[0])
    bounds = _cell_bounds(sigma, order, classes)
    if not bounds.monotone:
        return (ceiling,) * distances
    low, high = log_q_step_bounds(log_q, sigma, classes)
    here = gnmax_cost(log_q, sigma, order)
    at_zero = max(  # Algorithm 3 of PATE 2018 at this very q̃
        gnmax_cost(high, sigma, order) - here,
        here - (gnmax_cost(low, sigma, order) if low >= GRID_FLOOR else 0.0),
    )
    out = [min(max(at_zero, 0.0), ceiling)]
    first, last = _cell_of(bounds.grid, low), _cell_of(bounds.grid, high)
    worst = float(bounds.cells[first : last + 1].max())
    for _ in range(1, distances):
        out.append(min(worst, ceiling))
        low, _ = log_q_step_bounds(low, sigma, classes)
        _, high = log_q_step_bounds(high, sigma, classes)
        lo, hi = _cell_of(bounds.grid, low), _cell_of(bounds.grid, high)
        if lo < first or hi > last:
            worst = max(worst, float(bounds.cells[lo : hi + 1].max()))
            first, last = lo, hi
    return tuple(out)


def _cell_of(grid: NDArray[np.float64], log_q: float) -> int:
    """The cell holding ``log_q``: 0 below the floor, i + 1 for [grid[i], grid[i + 1]]."""
    return min(int(np.searchsorted(grid, log_q, side="right")), grid.size - 1)


def threshold_costs(
    teachers: int, threshold: float, sigma_threshold: float, order: float
) -> NDArray[np.float64]:
    """c(m) for m = 0 .. teachers: the threshold check's exact data-dependent RDP at ``order``
    when the largest count is m (computed once per setting)."""
    return np.array(
        _threshold_costs(int(teachers), float(threshold), float(sigma_threshold), float(order))
    )


@lru_cache(maxsize=64)
def _threshold_costs(
    teachers: int, threshold: float, sigma_threshold: float, order: float
) -> tuple[float, ...]:
    return tuple(
        float(threshold_rdp_at_max(m, threshold, sigma_threshold, [order])[0])
        for m in range(teachers + 1)
    )


def threshold_local_sensitivity(
    votes: ArrayLike,
    teachers: int,
    threshold: float,
    sigma_threshold: float,
    order: float,
    distances: int,
) -> NDArray[np.float64]:
    """A bound on LS(d) of the threshold check's data-dependent RDP at ``order``, d = 0 ..
    distances − 1: the largest one-move change of c over the counts m' within d of this
    histogram's max."""
    v = vote_histogram(votes, teachers)
    c = threshold_costs(teachers, threshold, sigma_threshold, order)
    step = np.zeros(teachers + 1)
    step[:-1] = np.abs(np.diff(c))  # m → m + 1
    step[1:] = np.maximum(step[1:], np.abs(np.diff(c)))  # m → m − 1
    m = int(v.max())
    return np.array(
        [step[max(0, m - d) : min(teachers, m + d) + 1].max() for d in range(distances)]
    )


def smooth_sensitivity(local: ArrayLike, beta: float, ceiling: float) -> float:
    """SS_β = max_d e^{−βd}·LS(d) over the given distances, and e^{−βD}·``ceiling`` for every
    distance D beyond them (``ceiling`` bounds the local sensitivity everywhere)."""
    ls = np.asarray(local, dtype=np.float64)
    if not beta > 0:
        raise AccountingError(f"β must be positive, got {beta}")
    discounts = np.exp(-beta * np.arange(ls.size + 1))
    return float(max(np.max(ls * discounts[:-1], initial=0.0), discounts[-1] * ceiling))


def gnss_order_limit(beta: float) -> float:
    """The orders where GNSS has finite RDP: λ < e^{2β}/(e^{2β} − 1) (about 1/(2β) + ½)."""
    return math.exp(2 * beta) / math.expm1(2 * beta)


def gnss_rdp(beta: float, sigma_s: float, orders: ArrayLike) -> NDArray[np.float64]:
    """A sound RDP bound of the GNSS mechanism f(D) + SS(D)·N(0, σ_s²) at each order.

    Neighbours D, D' satisfy |f(D) − f(D')| ≤ min(SS(D), SS(D')) and SS(D')/SS(D) ∈
    [e^{−β}, e^{β}]. Scaling SS(D) to 1, every such pair is N(Δ, e^{2b}σ_s²) against
    N(0, σ_s²) with b ∈ [−β, β], Δ ≤ min(1, e^b) (the reverse direction is the same family
    with b → −b). Their exact Rényi divergence is

        λΔ²/(2σ_s²·v(b)) + φ(b),   v(b) = λ − (λ − 1)e^{2b},   φ(b) = −b − log v(b)/(2(λ − 1)).

    The first term increases with b (Δ² ≤ min(1, e^{2b})), and φ is convex with its minimum
    at b = 0, so the bound taken is λ/(2σ_s²·v(β)) + max(φ(β), φ(−β)); ∞ where v(β) ≤ 0.

    PATE 2018's Theorem 23, λ·e^{2β}/σ_s² + (βλ − ½·log(1 − 2λβ))/(λ − 1)
    (``gnss_rdp_theorem_23``), is smaller than this exact divergence of a legal pair near
    λ ≈ 1/(2β) (0.526 against 0.652 at λ = 8, β = 0.05, σ_s = 5), so privlm does not use it
    (docs/sharp_edges.md).
    """
    a = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    if not (beta > 0 and sigma_s > 0):
        raise AccountingError("GNSS needs β > 0 and σ_s > 0")
    out = np.full(a.shape, np.inf)
    ok = (a > 1) & (a < gnss_order_limit(beta))
    lam = a[ok]

    def phi(b: float) -> NDArray[np.float64]:
        v = lam - (lam - 1) * math.exp(2 * b)
        return np.asarray(-b - np.log(v) / (2 * (lam - 1)))

    v_top = lam - (lam - 1) * math.exp(2 * beta)
    out[ok] = lam / (2 * sigma_s**2 * v_top) + np.maximum(phi(beta), phi(-beta))
    return out


def gnss_rdp_theorem_23(beta: float, sigma_s: float, orders: ArrayLike) -> NDArray[np.float64]:
    """PATE 2018's Theorem 23 as stated, for comparison only: not a sound bound near
    λ ≈ 1/(2β) (``gnss_rdp``)."""
    a = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    out = np.full(a.shape, np.inf)
    ok = (a > 1) & (a < 1 / (2 * beta))
    lam = a[ok]
    out[ok] = lam * math.exp(2 * beta) / sigma_s**2 + (
        beta * lam - 0.5 * np.log1p(-2 * lam * beta)
    ) / (lam - 1)
    return out
