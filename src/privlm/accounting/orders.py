"""The grid of Rényi orders α at which privlm composes RDP guarantees.

The default grid extends Opacus's (1.1, 1.2, ..., 10.9, then 12, ..., 63) with a few larger
orders up to 1024, which small-ε plans need: on Opacus's grid their best order is its last
one, 63, and the bound is looser than it has to be. Where the best order lies inside
Opacus's grid (most DP-SGD plans), privlm's RDP accountant and Opacus's agree to rounding.
The grid contains every integer from 2 to 63, which Theorem C.4 (Poisson amplification,
integer orders only) needs.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from privlm.errors import AccountingError

DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1 + x / 10.0 for x in range(1, 100)]
    + [float(a) for a in range(12, 64)]
    + [64.0, 80.0, 96.0, 128.0, 192.0, 256.0, 384.0, 512.0, 768.0, 1024.0]
)
INTEGER_ORDERS: tuple[int, ...] = tuple(range(2, 64))


def as_orders(orders: object) -> NDArray[np.float64]:
    """Validate a sequence of Rényi orders (each > 1, finite) and return it as an array."""
    arr = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    if arr.ndim != 1 or arr.size == 0:
        raise AccountingError("orders must be a non-empty sequence of numbers")
    if not np.all(np.isfinite(arr)) or np.any(arr <= 1.0):
        raise AccountingError(f"Rényi orders must be finite and > 1, got {arr.tolist()}")
    return arr
