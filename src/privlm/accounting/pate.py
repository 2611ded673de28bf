"""Confident-GNMax queries as RDP curves, and planning K of them (PromptPATE, §4.2).

The math is in ``analysis.gnmax``; this module turns one query into an ``RdpCurve`` on the
default order grid, so PromptPATE can charge it to a ledger and stop when the budget is
spent, and ``privlm account gnmax`` can plan.

The costs are **data-dependent** (Papernot et al. 2018): they depend on the votes. The ε a
run reports is therefore itself a function of the private data; PATE 2018 publishes it
through smooth sensitivity, which privlm does not do (docs/sharp_edges.md).
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
    vote_histogram,
)
from privlm.accounting.curves import RdpCurve
from privlm.accounting.orders import DEFAULT_ORDERS
from privlm.errors import AccountingError

SMALL_DATA_DELTA = 1e-6


def default_prompt_delta(n_private: int) -> float:
    """The default δ of private prompt learning: min(1/N^1.1, 1e-6) for N private examples.

    δ bounds the probability of a catastrophic failure, so it must be well below 1/N (a δ of
    1/N allows releasing one whole example outright); the Flocks paper uses δ of order
    1/N^1.1 or less. For the small N typical of prompts (20 examples would give δ = 0.04 at
    1/N^1.1) the floor is 1e-6.

    >>> default_prompt_delta(20), default_prompt_delta(10_000_000) < 1e-6
    (1e-06, True)
    """
    if n_private < 1:
        raise AccountingError(f"δ needs at least one private example, got {n_private}")
    return float(min(float(n_private) ** -1.1, SMALL_DATA_DELTA))


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
