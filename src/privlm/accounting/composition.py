"""How charges compose into one (ε, δ): functions of numbers only, shared by the ledger
(:mod:`privlm.accounting.ledger`, its running totals) and by statements computed from a
release's charges (:mod:`privlm.accounting.statements`), so both say the same figure.

Two sound statements are computed and the smaller reported (the composition satisfies both):

1. **RDP for everything:** every RDP curve adds order by order (PMixED Theorem C.2) and is
   converted at the best order (Theorem C.3); (ε, δ) parts add on top by basic composition.
2. **PLD where it applies:** the events composed by PLD (the ``prv`` accountant) to
   (ε₁, δ₁), every other RDP curve by RDP to (ε₂, δ₂), the (ε, δ) parts to (ε₃, δ₃); the
   total (ε₁+ε₂+ε₃, δ₁+δ₂+δ₃) by basic composition, minimised over the split
   δ₁ + δ₂ = δ − δ₃ on a fixed grid (Vadhan & Zhang 2023; Lyu 2022: basic composition holds
   for interactive mechanisms that interleave).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from privlm.accounting.analysis.conversion import balle_epsilon
from privlm.accounting.events import MechanismEvent, pld_epsilon

# δ₁/(δ − δ₃) tried for the PLD group when RDP charges share the ledger (a fixed grid)
DELTA_SPLITS = (0.001, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 0.999)


@dataclass(frozen=True)
class Spent:
    """The ε spent at δ, the Rényi order of the conversion (None if no RDP conversion gave
    it), and which composition gave it: "rdp", or "pld" (with the RDP rest, if any)."""

    epsilon: float
    delta: float
    order: float | None
    method: str = "rdp"


@dataclass(frozen=True)
class PldPart:
    """The charges composed by PLD, and the RDP sum of every other charge (stored as two
    ledger flags; absent from ledgers that never held a PLD charge)."""

    events: tuple[MechanismEvent, ...]
    rdp_rest: NDArray[np.float64]


def rdp_spent(
    orders: Sequence[float],
    rdp: NDArray[np.float64],
    approx_eps: float,
    approx_delta: float,
    delta: float,
    order_budget: float | None = None,
) -> Spent:
    """Statement 1: the RDP sum ``rdp`` (at ``orders``) converted at δ − ``approx_delta``,
    plus the (ε, δ) parts; with ``order_budget``, the RDP at that order (an RDP budget)."""
    if order_budget is not None:
        at = rdp[list(orders).index(float(order_budget))]
        return Spent(
            float(at) + (math.inf if approx_eps or approx_delta else 0.0), delta, order_budget
        )
    if not np.any(rdp > 0):
        eps = approx_eps if approx_delta <= delta else math.inf
        return Spent(eps, delta, None)
    if approx_delta >= delta:
        return Spent(math.inf, delta, None)
    conv = balle_epsilon(orders, rdp, delta - approx_delta)
    return Spent(approx_eps + conv.epsilon, delta, conv.order)


def pld_spent(
    orders: Sequence[float], pld: PldPart, approx_eps: float, approx_delta: float, delta: float
) -> Spent:
    """Statement 2: the PLD group + the RDP rest + the (ε, δ) parts."""
    avail = delta - approx_delta
    if avail <= 0:
        return Spent(math.inf, delta, None, "pld")
    if not np.any(pld.rdp_rest > 0):
        return Spent(approx_eps + pld_epsilon(pld.events, avail), delta, None, "pld")
    best = Spent(math.inf, delta, None, "pld+rdp")
    for f in DELTA_SPLITS:
        conv = balle_epsilon(orders, pld.rdp_rest, (1.0 - f) * avail)
        eps = approx_eps + pld_epsilon(pld.events, f * avail) + conv.epsilon
        if eps < best.epsilon:
            best = Spent(eps, delta, conv.order, "pld+rdp")
    return best


def composed_spent(
    orders: Sequence[float],
    rdp: NDArray[np.float64],
    approx_eps: float,
    approx_delta: float,
    delta: float,
    pld: PldPart | None = None,
    order_budget: float | None = None,
) -> Spent:
    """The tighter of the two statements (the first alone under an RDP budget, or when no
    event is composed by PLD)."""
    by_rdp = rdp_spent(orders, rdp, approx_eps, approx_delta, delta, order_budget)
    if pld is None or not pld.events or order_budget is not None:
        return by_rdp
    by_pld = pld_spent(orders, pld, approx_eps, approx_delta, delta)
    return by_pld if by_pld.epsilon < by_rdp.epsilon else by_rdp
