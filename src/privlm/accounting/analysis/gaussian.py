"""RDP of the Gaussian mechanism, plain and Poisson-subsampled (sensitivity 1).

- Plain: ε(α) = α / (2σ²) (Mironov 2017, Proposition 7).
- Poisson-subsampled, as DP-SGD uses it: Mironov, Talwar & Zhang 2019, computed by Opacus's
  analysis module (``opacus.accountants.analysis.rdp``), which handles fractional orders.
  Tests compare it with dp-accounting at integer orders, and with Theorem C.4 applied to
  the plain curve, which is exact for the Gaussian at integer orders.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privlm.accounting.analysis import opacus_analysis
from privlm.accounting.orders import as_orders
from privlm.errors import AccountingError


def _check_sigma(noise_multiplier: float) -> float:
    s = float(noise_multiplier)
    if not (s > 0.0 and np.isfinite(s)):
        raise AccountingError(f"the noise multiplier σ must be positive, got {noise_multiplier!r}")
    return s


def gaussian_rdp(noise_multiplier: float, orders: ArrayLike) -> NDArray[np.float64]:
    """ε(α) = α/(2σ²) of the Gaussian mechanism with L2 sensitivity 1."""
    s = _check_sigma(noise_multiplier)
    out: NDArray[np.float64] = as_orders(orders) / (2.0 * s * s)
    return out


def subsampled_gaussian_rdp(
    sample_rate: float, noise_multiplier: float, orders: ArrayLike, steps: int = 1
) -> NDArray[np.float64]:
    """RDP of ``steps`` compositions of the Poisson-subsampled Gaussian mechanism."""
    q = float(sample_rate)
    if not (0.0 < q <= 1.0):
        raise AccountingError(f"the sample rate q must lie in (0, 1], got {sample_rate!r}")
    if int(steps) != steps or steps < 1:
        raise AccountingError(f"steps must be a positive integer, got {steps!r}")
    s = _check_sigma(noise_multiplier)
    a = as_orders(orders)
    return np.asarray(_one_step_rdp(q, s, tuple(a.tolist())), dtype=np.float64) * int(steps)


@lru_cache(maxsize=8192)
def _one_step_rdp(
    q: float, noise_multiplier: float, orders: tuple[float, ...]
) -> tuple[float, ...]:
    """One step's RDP at each order, remembered: Opacus's series for a fractional order is a
    Python loop (about 5 ms an order), and a plan's curve is asked for again by the ledger,
    the statement and every calibration of the same settings. ``compute_rdp`` scales one
    step's curve by ``steps``, as the caller does, so the values are the same."""
    values = opacus_analysis.rdp.compute_rdp(
        q=q, noise_multiplier=noise_multiplier, steps=1, orders=list(orders)
    )
    return tuple(float(v) for v in np.asarray(values, dtype=np.float64))
