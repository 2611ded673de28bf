"""Bounded-range mechanisms and zCDP: the accounting of DClip (InvisibleInk's clipped
exponential mechanism, :mod:`privlm.synth.dclip`).

A mechanism is η-bounded-range when, for neighbouring inputs, the log-ratio of its output
probabilities lies in an interval of width η at every output. An η-bounded-range mechanism
is η²/8-zCDP (Cesar & Rogers 2021; Dong, Durfee & Rogers 2020 for the exponential
mechanism), that is (a, aη²/8)-RDP at every order a > 1, and zCDP composes by adding ρ.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from privlm.accounting.analysis.conversion import balle_epsilon
from privlm.errors import AccountingError

CALIBRATION_MARGIN = 1e-9  # ρ is set this far below the budget, so every planned step fits


def dclip_token_rho(clip: float, members: int) -> float:
    """ρ of one DClip token, one member replaced: the mean of M clipped differences moves by
    at most Δ = 2C/M per output, so the range is 2Δ = 4C/M and ρ = (4C/M)²/8 = 2C²/M²."""
    if members < 1 or clip < 0:
        raise AccountingError("DClip needs at least one member and a clip C ≥ 0")
    return 2.0 * clip * clip / (members * members)


def zcdp_rdp(rho: float, orders: NDArray[np.float64]) -> NDArray[np.float64]:
    """ρ-zCDP as RDP: ε(a) = aρ."""
    out: NDArray[np.float64] = np.asarray(orders, dtype=np.float64) * float(rho)
    return out


def calibrate_rho(epsilon: float, delta: float, orders: NDArray[np.float64]) -> float:
    """The largest total ρ whose RDP curve converts (Theorem C.3, best order) to at most
    (ε, δ), less a relative ``CALIBRATION_MARGIN``."""

    def eps(rho: float) -> float:
        return balle_epsilon(orders, zcdp_rdp(rho, orders), delta).epsilon

    lo, hi = 0.0, 1.0
    while eps(hi) <= epsilon:
        lo, hi = hi, hi * 2.0
        if hi > 1e9:
            raise AccountingError(f"ε={epsilon} at δ={delta} bounds no ρ")
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if eps(mid) <= epsilon else (lo, mid)
    if lo <= 0:
        raise AccountingError(f"ε={epsilon} at δ={delta} leaves no zCDP budget")
    return lo * (1.0 - CALIBRATION_MARGIN)


def share_epsilon(epsilon: float, delta: float, shares: int, orders: NDArray[np.float64]) -> float:
    """The ε one of ``shares`` equal parts of (ε, δ)'s zCDP budget converts to: the most a
    part planned by :func:`calibrate_rho` (ρ/``shares`` each, less the margin) may spend.
    Taken before the margin, so a part's planned steps fit it with the margin to spare;
    at most ε."""
    rho = calibrate_rho(epsilon, delta, orders) / (1.0 - CALIBRATION_MARGIN)
    return balle_epsilon(orders, zcdp_rdp(rho / shares, orders), delta).epsilon


def dclip_clip_for(rho_per_token: float, members: int) -> float:
    """C such that one token costs ``rho_per_token``: M·√(ρ/2)."""
    return members * math.sqrt(rho_per_token / 2.0)
