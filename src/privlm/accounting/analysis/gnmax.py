"""RDP of PATE's aggregators on a vote histogram (Papernot et al. 2018, ICLR; PromptPATE,
Flocks of Stochastic Parrots, App. C.2–C.3).

Neighbouring relation: add or remove one private example. Each example sits in at most one
teacher, so a neighbour changes at most one teacher's vote: the histogram ``n`` moves by at
most 1 in two classes (L2 sensitivity √2), and its maximum by at most 1.

- GNMax, argmax_j(n_j + N(0, σ²)): data-independent RDP λ/σ² (Gaussian mechanism with
  sensitivity √2). Data-dependent (Theorem 6 of Papernot et al. 2018): with
  q̃ ≥ Pr[GNMax(n) ≠ argmax n] (Proposition 7: q̃ = Σ_{j≠j*} ½·erfc((n_{j*} − n_j)/(2σ))),
  μ2 = σ·√log(1/q̃), μ1 = μ2 + 1, ε_i = μ_i/σ², and when q̃ is small enough,
      ε(λ) ≤ 1/(λ−1) · log((1−q̃)·A^{λ−1} + q̃·B^{λ−1}),
      A = (1−q̃) / (1 − (q̃·e^{ε2})^{(μ2−1)/μ2}),   B = e^{ε1} / q̃^{1/(μ1−1)},
  for λ ≤ μ1; privlm takes the minimum with the data-independent bound.
- The threshold check of Confident-GNMax, [max_j n_j + N(0, σ1²) ≥ T]: its output is one
  bit, Bernoulli(Φ((m − T)/σ1)) with m = max_j n_j, and a neighbour moves m by at most 1. Its
  data-dependent RDP is computed exactly, as the largest Rényi divergence (either direction)
  between the bits at m and m ± 1; never more than the data-independent λ/(2σ1²).

Every function takes the **vote histogram** (counts per class), never a per-teacher label
matrix: a public implementation passes the matrix, which understates ε about 12×.
``vote_histogram`` refuses anything that is not one row of counts.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy.special import log_ndtr, logsumexp

from privlm.accounting.orders import as_orders
from privlm.errors import AccountingError


def vote_histogram(
    votes: ArrayLike, teachers: int | None = None, classes: int | None = None
) -> NDArray[np.float64]:
    """``votes`` checked to be a histogram: one row of non-negative counts, one per class
    (``classes`` of them, when given), summing to at most ``teachers`` (when given; the rest
    abstained or answered "other")."""
    v = np.asarray(votes, dtype=np.float64)
    if v.ndim != 1:
        raise AccountingError(
            f"pass vote counts per class (a 1-D histogram), not an array of shape {v.shape}: "
            "a per-teacher label matrix in place of counts understates ε (about 12× in a "
            "known public implementation). Use np.bincount(labels, minlength=classes)."
        )
    if v.size < 2:
        raise AccountingError("a vote histogram needs at least two classes")
    if np.any(v < 0) or not np.all(np.isfinite(v)) or np.any(v != np.round(v)):
        raise AccountingError("vote counts must be non-negative integers")
    if classes is not None and v.size != classes:
        raise AccountingError(
            f"the histogram has {v.size} entries but there are {classes} classes: pass counts "
            "per class, not one label per teacher"
        )
    if teachers is not None and v.sum() > teachers:
        raise AccountingError(
            f"the histogram counts {int(v.sum())} votes but there are only {teachers} "
            "teachers: is this a label matrix or list of labels rather than counts per class?"
        )
    return v


def log_q_gnmax(votes: ArrayLike, sigma: float) -> float:
    """log q̃, Proposition 7: a bound on log Pr[GNMax ≠ argmax] (never above 0)."""
    v = vote_histogram(votes)
    _check_sigma(sigma)
    top = int(np.argmax(v))
    gaps = np.delete(v[top] - v, top)
    # ½·erfc(g/(2σ)) = Φ(−g/(√2·σ))
    terms = log_ndtr(-gaps / (math.sqrt(2.0) * sigma))
    return float(min(0.0, logsumexp(terms)))


def rdp_gnmax_data_independent(sigma: float, orders: ArrayLike) -> NDArray[np.float64]:
    """λ/σ²: the Gaussian mechanism on a histogram with L2 sensitivity √2."""
    _check_sigma(sigma)
    out: NDArray[np.float64] = as_orders(orders) / sigma**2
    return out


def rdp_gnmax(log_q: float, sigma: float, orders: ArrayLike) -> NDArray[np.float64]:
    """Data-dependent RDP of GNMax at a histogram whose log q̃ is ``log_q`` (Theorem 6),
    never above the data-independent bound."""
    a = as_orders(orders)
    out = rdp_gnmax_data_independent(sigma, a).copy()
    if not log_q < 0:
        return out
    var = sigma**2
    mu2 = sigma * math.sqrt(-log_q)
    mu1 = mu2 + 1.0
    if mu2 <= 1.0:
        return out
    eps1, eps2 = mu1 / var, mu2 / var
    # Theorem 6's conditions: q̃·e^{ε2} < 1, and q̃ ≤ e^{(μ2−1)ε2} / (μ1/(μ1−1) · μ2/(μ2−1))^{μ2}
    if not -log_q > eps2:
        return out
    limit = (mu2 - 1.0) * eps2 - mu2 * (math.log1p(1 / (mu1 - 1)) + math.log1p(1 / (mu2 - 1)))
    if not log_q <= limit:
        return out
    usable = a <= mu1
    if not np.any(usable):
        return out
    lam = a[usable]
    log_1mq = _log1mexp(log_q)
    log_a = log_1mq - _log1mexp((log_q + eps2) * (1.0 - 1.0 / mu2))
    log_b = eps1 - log_q / (mu1 - 1.0)
    log_s = np.logaddexp(log_1mq + (lam - 1) * log_a, log_q + (lam - 1) * log_b)
    out[usable] = np.minimum(out[usable], log_s / (lam - 1))
    return np.maximum(out, 0.0)


def log_pr_answered(votes: ArrayLike, threshold: float, sigma_threshold: float) -> float:
    """log Pr[max_j n_j + N(0, σ1²) ≥ T]."""
    v = vote_histogram(votes)
    _check_sigma(sigma_threshold)
    return float(log_ndtr((v.max() - threshold) / sigma_threshold))


def rdp_threshold(
    votes: ArrayLike, threshold: float, sigma_threshold: float, orders: ArrayLike
) -> NDArray[np.float64]:
    """Data-dependent RDP of the threshold check, exactly (module docstring)."""
    return threshold_rdp_at_max(
        float(vote_histogram(votes).max()), threshold, sigma_threshold, orders
    )


def threshold_rdp_at_max(
    m: float, threshold: float, sigma_threshold: float, orders: ArrayLike
) -> NDArray[np.float64]:
    """The threshold check's exact data-dependent RDP when the largest vote count is ``m``
    (it depends on the votes through m only)."""
    _check_sigma(sigma_threshold)
    a = as_orders(orders)
    here = _bernoulli_logs(m, threshold, sigma_threshold)
    worst = np.zeros_like(a)
    for shifted in (m - 1.0, m + 1.0):
        if shifted < 0:
            continue
        there = _bernoulli_logs(shifted, threshold, sigma_threshold)
        worst = np.maximum(worst, bernoulli_renyi(here, there, a))
        worst = np.maximum(worst, bernoulli_renyi(there, here, a))
    return np.minimum(worst, rdp_threshold_data_independent(sigma_threshold, a))


def rdp_threshold_data_independent(
    sigma_threshold: float, orders: ArrayLike
) -> NDArray[np.float64]:
    """λ/(2σ1²): the threshold check as a Gaussian mechanism on the max count (sensitivity 1)."""
    _check_sigma(sigma_threshold)
    out: NDArray[np.float64] = as_orders(orders) / (2.0 * sigma_threshold**2)
    return out


def confident_gnmax_rdp(
    votes: ArrayLike,
    threshold: float,
    sigma_threshold: float,
    sigma: float,
    orders: ArrayLike,
    answered: bool = True,
) -> NDArray[np.float64]:
    """RDP of one Confident-GNMax query: the threshold check, plus GNMax if it answered."""
    a = as_orders(orders)
    cost = rdp_threshold(votes, threshold, sigma_threshold, a)
    if answered:
        cost = cost + rdp_gnmax(log_q_gnmax(votes, sigma), sigma, a)
    return cost


def bernoulli_renyi(
    logs_p: tuple[float, float], logs_r: tuple[float, float], orders: NDArray[np.float64]
) -> NDArray[np.float64]:
    """D_λ(Ber(p) ‖ Ber(r)), from (log p, log(1−p)) and (log r, log(1−r))."""
    (lp, l1p), (lr, l1r) = logs_p, logs_r
    terms = np.stack([orders * lp + (1 - orders) * lr, orders * l1p + (1 - orders) * l1r])
    val: NDArray[np.float64] = logsumexp(terms, axis=0) / (orders - 1)
    return np.maximum(val, 0.0)


def _bernoulli_logs(m: float, threshold: float, sigma: float) -> tuple[float, float]:
    z = (m - threshold) / sigma
    return float(log_ndtr(z)), float(log_ndtr(-z))


def _log1mexp(x: float) -> float:
    """log(1 − e^x) for x < 0, accurately."""
    if x >= 0:
        raise AccountingError("log(1 - e^x) needs x < 0")
    return math.log(-math.expm1(x)) if x > -0.693 else math.log1p(-math.exp(x))


def _check_sigma(sigma: float) -> None:
    if not (sigma > 0 and math.isfinite(sigma)):
        raise AccountingError(f"σ must be positive, got {sigma!r}")
