"""Confident-GNMax queries as RDP curves, and planning K of them (PromptPATE, §4.2).

The math is in ``analysis.gnmax``; this module turns one query into an ``RdpCurve`` on the
default order grid, so PromptPATE can charge it to a ledger and stop when the budget is
spent, and ``privlm account gnmax`` can plan.

The costs are **data-dependent** (Papernot et al. 2018): they depend on the votes, so the
raw ε is itself a function of the private data. ``release_data_dependent_rdp`` publishes it
as PATE 2018 does, through smooth sensitivity (GNSS, ``analysis.pate_smooth``), and the
release's own cost is part of what is charged. ``data_independent_query_curve`` is the
worst case of one query whatever the votes (docs/sharp_edges.md, "PromptPATE").
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from privlm.accounting.analysis.gnmax import (
    confident_gnmax_rdp,
    log_pr_answered,
    log_q_gnmax,
    rdp_gnmax_data_independent,
    rdp_threshold_data_independent,
    vote_histogram,
)
from privlm.accounting.analysis.pate_smooth import (
    gnmax_local_sensitivity,
    gnss_order_limit,
    gnss_rdp,
    smooth_sensitivity,
    threshold_local_sensitivity,
)
from privlm.accounting.curves import RdpCurve
from privlm.accounting.orders import DEFAULT_ORDERS
from privlm.errors import AccountingError


def confident_gnmax_curve(
    votes: ArrayLike,
    threshold: float,
    sigma_threshold: float,
    sigma: float,
    answered: bool,
    teachers: int | None = None,
) -> RdpCurve:
    """The RDP curve of one Confident-GNMax query on a vote histogram."""
    v = vote_histogram(votes, teachers)
    orders = np.asarray(DEFAULT_ORDERS)
    eps = confident_gnmax_rdp(v, threshold, sigma_threshold, sigma, orders, answered)
    return RdpCurve.from_arrays(orders, eps)


def data_independent_query_curve(sigma_threshold: float, sigma: float) -> RdpCurve:
    """One Confident-GNMax query answered, whatever the votes: λ/(2σ1²) + λ/σ²."""
    orders = np.asarray(DEFAULT_ORDERS)
    eps = rdp_threshold_data_independent(sigma_threshold, orders) + rdp_gnmax_data_independent(
        sigma, orders
    )
    return RdpCurve.from_arrays(orders, eps)


@dataclass(frozen=True)
class SmoothRelease:
    """How the data-dependent RDP is released (PATE 2018, §4): at one RDP ``order`` λ, fixed
    before the votes are seen, with smoothness ``beta`` (λ < e^{2β}/(e^{2β} − 1), about
    1/(2β)) and noise ``sigma`` σ_s times the smooth sensitivity."""

    order: float = 8.0
    beta: float = 0.05
    sigma: float = 5.0

    def __post_init__(self) -> None:
        if not (self.beta > 0 and self.sigma > 0 and math.isfinite(self.sigma)):
            raise AccountingError("the smooth-sensitivity release needs β > 0 and σ_s > 0")
        limit = gnss_order_limit(self.beta)
        if not 1 < self.order < limit:
            raise AccountingError(
                f"the release order λ={self.order} must lie in (1, e^(2β)/(e^(2β) − 1)) = "
                f"(1, {limit:.4g}) for β={self.beta}; lower β or λ"
            )

    def cost_curve(self) -> RdpCurve:
        """The GNSS release's own RDP on the default orders (∞ where it has none):
        data-independent."""
        orders = np.asarray(DEFAULT_ORDERS)
        return RdpCurve.from_arrays(orders, gnss_rdp(self.beta, self.sigma, orders))


@dataclass(frozen=True)
class ReleasedRdp:
    """The privately released data-dependent RDP of a set of queries, at one order."""

    order: float
    beta: float
    sigma_s: float
    noisy_rdp: float  # Σ cost_i(D) + SS·N(0, σ_s²): the released estimate (may be < 0)
    release_rdp: float  # the GNSS release's own RDP at the order (analysis.pate_smooth)

    @property
    def charged_rdp(self) -> float:
        """What is charged at the order: the estimate (at least 0) plus the release's cost."""
        return max(self.noisy_rdp, 0.0) + self.release_rdp

    def curve(self) -> RdpCurve:
        return RdpCurve.from_arrays([self.order], [self.charged_rdp])

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "charged_rdp": self.charged_rdp}


def release_data_dependent_rdp(
    histograms: ArrayLike,
    answered: ArrayLike,
    teachers: int,
    threshold: float,
    sigma_threshold: float,
    sigma: float,
    release: SmoothRelease,
    standard_normal: float,
) -> ReleasedRdp:
    """GNSS (PATE 2018 §4): the data-dependent RDP at ``release.order`` of Confident-GNMax on
    every histogram (``answered``: whether its threshold check passed), plus the smooth
    sensitivity of that sum times σ_s·``standard_normal`` (a fresh N(0, 1) draw from the
    caller's privacy randomness)."""
    h = np.asarray(histograms)
    ans = np.asarray(answered, dtype=bool)
    if h.ndim != 2 or ans.shape != (h.shape[0],):
        raise AccountingError("pass one vote histogram and one answered flag per query")
    lam = release.order
    distances = teachers + 1  # any two histograms are at most ``teachers`` moves apart
    total, local = 0.0, np.zeros(distances)
    for votes, was_answered in zip(h, ans, strict=True):
        v = vote_histogram(votes, teachers)
        total += float(
            confident_gnmax_rdp(v, threshold, sigma_threshold, sigma, [lam], bool(was_answered))[0]
        )
        local += threshold_local_sensitivity(
            v, teachers, threshold, sigma_threshold, lam, distances
        )
        if was_answered:
            local += gnmax_local_sensitivity(v, sigma, lam, distances)
    # each query's cost lies in [0, its data-independent bound], so no change exceeds that
    ceiling = float(
        h.shape[0] * rdp_threshold_data_independent(sigma_threshold, [lam])[0]
        + int(ans.sum()) * rdp_gnmax_data_independent(sigma, [lam])[0]
    )
    ss = smooth_sensitivity(local, release.beta, ceiling)
    noisy = total + ss * release.sigma * standard_normal
    cost = float(gnss_rdp(release.beta, release.sigma, [lam])[0])
    return ReleasedRdp(lam, release.beta, release.sigma, noisy, cost)


@dataclass(frozen=True)
class GnmaxPlan:
    votes: tuple[int, ...]
    threshold: float
    sigma_threshold: float
    sigma: float
    delta: float
    queries: int
    epsilon: float  # K queries, every one answered
    order: float | None
    epsilon_unanswered: float  # K queries, none answered (threshold checks only)
    pr_answered: float
    pr_not_argmax: float  # q̃, the bound on GNMax returning another class than the plurality
    data_dependent: bool = True

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def plan_gnmax(
    votes: ArrayLike,
    threshold: float,
    sigma_threshold: float,
    sigma: float,
    delta: float,
    queries: int,
) -> GnmaxPlan:
    """ε at δ of ``queries`` identical Confident-GNMax queries on ``votes``."""
    if queries < 1:
        raise AccountingError("the number of queries must be at least 1")
    if not 0 < delta < 1:
        raise AccountingError(f"δ must lie in (0, 1), got {delta}")
    v = vote_histogram(votes)
    answered = confident_gnmax_curve(v, threshold, sigma_threshold, sigma, True).times(queries)
    silent = confident_gnmax_curve(v, threshold, sigma_threshold, sigma, False).times(queries)
    conv = answered.to_dp(delta)
    return GnmaxPlan(
        votes=tuple(int(x) for x in v),
        threshold=threshold,
        sigma_threshold=sigma_threshold,
        sigma=sigma,
        delta=delta,
        queries=queries,
        epsilon=conv.epsilon,
        order=conv.order,
        epsilon_unanswered=silent.to_dp(delta).epsilon,
        pr_answered=math.exp(log_pr_answered(v, threshold, sigma_threshold)),
        pr_not_argmax=math.exp(log_q_gnmax(v, sigma)),
    )
