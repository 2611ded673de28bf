"""Privacy amplification by Poisson subsampling for any RDP mechanism.

Theorem C.4 / Eq. 12 of the PMixED paper (``shared/papers/000``), from Steinke 2022:
if M is (k, ε(k))-RDP for every integer k ≥ 2 under add/remove-one neighbours, and U keeps
each element independently with probability q, then M(x_U) is (α, ε'_q(α))-RDP with::

    ε'_q(α) = 1/(α−1) · log( (1−q)^(α−1) (1 + (α−1) q)
                             + Σ_{k=2..α} C(α,k) (1−q)^(α−k) q^k e^{(k−1) ε(k)} )

for integer α ≥ 2. Every term is computed in log space (log-binomials and a log-sum-exp),
so orders in the hundreds and large ε(k) neither overflow nor lose precision.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privlm.errors import AccountingError

RdpFunction = Callable[[int], float]


def _integer_orders(orders: ArrayLike) -> NDArray[np.int64]:
    arr = np.atleast_1d(np.asarray(orders, dtype=np.float64))
    if arr.size == 0 or np.any(arr < 2) or np.any(arr != np.round(arr)):
        raise AccountingError(
            "Poisson amplification (Theorem C.4) holds at integer orders α ≥ 2 only, "
            f"got {arr.tolist()}"
        )
    return arr.astype(np.int64)


def _base_curve(
    base_rdp: RdpFunction | Sequence[float] | ArrayLike, k_max: int
) -> NDArray[np.float64]:
    """ε(k) for k = 2..k_max, from a function of k or an array indexed from k = 2."""
    if callable(base_rdp):
        values = np.array([float(base_rdp(k)) for k in range(2, k_max + 1)], dtype=np.float64)
    else:
        values = np.asarray(base_rdp, dtype=np.float64)
        if values.ndim != 1 or values.size < k_max - 1:
            raise AccountingError(
                f"the base RDP curve must give ε(k) for k = 2..{k_max} "
                f"({k_max - 1} values), got {values.size}"
            )
        values = values[: k_max - 1]
    if np.any(np.isnan(values)) or np.any(values < 0):
        raise AccountingError("the base RDP curve must be non-negative (inf allowed)")
    return values


def poisson_subsampled_rdp(
    base_rdp: RdpFunction | Sequence[float] | ArrayLike,
    sample_rate: float,
    orders: ArrayLike,
) -> NDArray[np.float64]:
    """ε'_q(α) of Eq. 12 at each integer order α, for a mechanism with RDP curve ε(k).

    ``base_rdp`` is either a function k ↦ ε(k) or an array [ε(2), ε(3), ...] reaching at
    least the largest requested order.
    """
    q = float(sample_rate)
    if not (0.0 <= q <= 1.0):
        raise AccountingError(f"the sampling rate q must lie in [0, 1], got {sample_rate!r}")
    alphas = _integer_orders(orders)
    k_max = int(alphas.max())
    eps_k = _base_curve(base_rdp, k_max)  # eps_k[j] = ε(j + 2)
    if q == 0.0:
        return np.zeros(alphas.shape, dtype=np.float64)
    if q == 1.0:
        return eps_k[alphas - 2].copy()

    log_q, log_1mq = np.log(q), np.log1p(-q)
    ks = np.arange(2, k_max + 1, dtype=np.float64)  # shape (K,)
    a = alphas.astype(np.float64)[:, None]  # shape (A, 1)
    valid = ks[None, :] <= a
    from scipy.special import gammaln, logsumexp  # here: a CLI's --help needs no SciPy

    with np.errstate(invalid="ignore"):
        log_binom = gammaln(a + 1) - gammaln(ks + 1) - gammaln(a - ks + 1)
        terms = log_binom + (a - ks) * log_1mq + ks * log_q + (ks - 1) * eps_k[None, :]
    terms = np.where(valid, terms, -np.inf)
    head = (a[:, 0] - 1) * log_1mq + np.log1p((a[:, 0] - 1) * q)
    log_total = logsumexp(np.concatenate([head[:, None], terms], axis=1), axis=1)
    out: NDArray[np.float64] = np.maximum(log_total / (a[:, 0] - 1), 0.0)
    return out
