"""Immutable RDP curves: a guarantee (α, ε(α)) at several orders, and their composition.

Neighbouring relation: add or remove one privacy unit (a record, a user, or an ensemble
member, whichever the mechanism names). Composition adds curves order by order
(Theorem C.2 of the PMixED paper); an order a curve does not cover counts as ε = ∞ there,
so composing never invents a guarantee.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privlm.accounting.analysis.conversion import DpConversion, balle_epsilon, classic_epsilon
from privlm.accounting.orders import as_orders
from privlm.errors import AccountingError

NEIGHBOURING_RELATION = "add or remove one privacy unit"


@dataclass(frozen=True)
class RdpCurve:
    """(α, ε(α))-RDP at each of ``orders``."""

    orders: tuple[float, ...]
    epsilons: tuple[float, ...]

    def __post_init__(self) -> None:
        a = as_orders(self.orders)
        e = np.asarray(self.epsilons, dtype=np.float64)
        if e.shape != a.shape:
            raise AccountingError("an RDP curve needs one ε per order")
        if np.any(np.isnan(e)) or np.any(e < 0):
            raise AccountingError("RDP values must be non-negative (inf allowed)")
        if len(set(self.orders)) != len(self.orders):
            raise AccountingError("an RDP curve's orders must be distinct")

    @classmethod
    def from_arrays(cls, orders: ArrayLike, epsilons: ArrayLike) -> RdpCurve:
        a = np.atleast_1d(np.asarray(orders, dtype=np.float64))
        e = np.atleast_1d(np.asarray(epsilons, dtype=np.float64))
        return cls(tuple(float(x) for x in a), tuple(float(x) for x in e))

    @classmethod
    def from_mapping(cls, values: Mapping[float, float]) -> RdpCurve:
        items = sorted(values.items())
        return cls(tuple(float(k) for k, _ in items), tuple(float(v) for _, v in items))

    def at(self, orders: ArrayLike) -> NDArray[np.float64]:
        """ε at the requested orders; ∞ at any order this curve does not cover."""
        wanted = as_orders(orders)
        mine = np.asarray(self.orders, dtype=np.float64)
        vals = np.asarray(self.epsilons, dtype=np.float64)
        match = np.isclose(wanted[:, None], mine[None, :], rtol=0.0, atol=1e-9)
        out = np.full(wanted.shape, np.inf)
        hit = match.any(axis=1)
        out[hit] = vals[match.argmax(axis=1)[hit]]
        return out

    def compose(self, other: RdpCurve) -> RdpCurve:
        """Sequential composition (Theorem C.2): ε adds at every order."""
        union = sorted(set(self.orders) | set(other.orders))
        return RdpCurve.from_arrays(union, self.at(union) + other.at(union))

    def __add__(self, other: RdpCurve) -> RdpCurve:
        return self.compose(other)

    def times(self, count: int) -> RdpCurve:
        """``count``-fold self-composition."""
        if int(count) != count or count < 0:
            raise AccountingError(
                f"a composition count must be a non-negative integer, got {count}"
            )
        return RdpCurve(self.orders, tuple(float(e) * int(count) for e in self.epsilons))

    def to_dp(self, delta: float) -> DpConversion:
        """(ε, δ)-DP by Theorem C.3 (Balle et al. 2020) at the best order."""
        return balle_epsilon(self.orders, self.epsilons, delta)

    def to_dp_classic(self, delta: float) -> DpConversion:
        """(ε, δ)-DP by the classic bound (Mironov 2017) at the best order."""
        return classic_epsilon(self.orders, self.epsilons, delta)
