"""RDP → (ε, δ)-DP conversion, optimised over the order α.

Two bounds, for an (α, ρ)-RDP mechanism and a target δ:

- Balle et al. 2020 (Theorem 21), stated as Theorem C.3 of the PMixED paper
  (``shared/papers/000``)::

      ε = ρ + log((α − 1)/α) − (log δ + log α)/(α − 1)

- the classic bound of Mironov 2017 (Proposition 3)::

      ε = ρ + log(1/δ)/(α − 1)

Balle's is never larger than the classic one. Both are reported at the best order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privlm.accounting.orders import as_orders
from privlm.errors import AccountingError


@dataclass(frozen=True)
class DpConversion:
    """An (ε, δ)-DP guarantee obtained from an RDP curve at its best order."""

    epsilon: float
    delta: float
    order: float
    method: str


def check_delta(delta: float) -> float:
    """Return δ as a float if 0 < δ < 1, else raise :class:`AccountingError`."""
    d = float(delta)
    if not (0.0 < d < 1.0):
        raise AccountingError(f"δ must lie strictly between 0 and 1, got {delta!r}")
    return d


def _best(
    orders: ArrayLike,
    rdp: ArrayLike,
    delta: float,
    method: str,
    bound: Callable[[NDArray[np.float64], NDArray[np.float64], float], NDArray[np.float64]],
) -> DpConversion:
    a = as_orders(orders)
    r = np.broadcast_to(np.asarray(rdp, dtype=np.float64), a.shape)
    if np.any(np.isnan(r)) or np.any(r < 0):
        raise AccountingError("RDP values must be non-negative numbers (inf allowed)")
    d = check_delta(delta)
    with np.errstate(invalid="ignore", over="ignore"):
        eps = bound(a, r, d)
    eps = np.where(np.isnan(eps), np.inf, eps)
    i = int(np.argmin(eps))
    return DpConversion(max(float(eps[i]), 0.0), d, float(a[i]), method)


def balle_per_order(
    a: NDArray[np.float64], r: NDArray[np.float64], d: float
) -> NDArray[np.float64]:
    """Theorem C.3's ε at each order ``a`` for RDP ``r`` (the best order is their minimum)."""
    out: NDArray[np.float64] = r + np.log1p(-1.0 / a) - (np.log(d) + np.log(a)) / (a - 1.0)
    return out


def _classic(a: NDArray[np.float64], r: NDArray[np.float64], d: float) -> NDArray[np.float64]:
    out: NDArray[np.float64] = r + np.log(1.0 / d) / (a - 1.0)
    return out


def balle_epsilon(orders: ArrayLike, rdp: ArrayLike, delta: float) -> DpConversion:
    """ε at δ by Theorem C.3 of the PMixED paper (Balle et al. 2020), best order."""
    return _best(orders, rdp, delta, "balle2020", balle_per_order)


def classic_epsilon(orders: ArrayLike, rdp: ArrayLike, delta: float) -> DpConversion:
    """ε at δ by the classic bound (Mironov 2017, Proposition 3), best order."""
    return _best(orders, rdp, delta, "mironov2017", _classic)
