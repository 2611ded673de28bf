"""Accounting for DP-SGD: ε of a training plan, and the σ that meets a target ε.

A DP-SGD plan is ``steps`` compositions of the Poisson-subsampled Gaussian mechanism with
sample rate q and noise multiplier σ (Abadi et al. 2016). Two accountants:

- ``rdp``: the RDP curve at :data:`DEFAULT_ORDERS` (Opacus's analysis) converted by
  Theorem C.3 of the PMixED paper at the best order;
- ``prv``: privacy-loss-distribution accounting (the PRV/PLD family: Koskela et al. 2020,
  Gopi et al. 2021), computed by dp-accounting's PLD accountant with pessimistic
  discretisation (:func:`privlm.accounting.events.pld_epsilon`), an upper bound. Tighter
  than RDP. The ledger composes a ``prv`` run with the same function, so its ε equals the
  run's ``privacy.json``; tests compare it with Opacus's PRV accountant.

Calibration returns a σ whose ε is at most the target: never overshooting ε.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Literal

import numpy as np

from privlm.accounting.analysis.conversion import balle_epsilon, balle_per_order, check_delta
from privlm.accounting.analysis.gaussian import subsampled_gaussian_rdp
from privlm.accounting.curves import RdpCurve
from privlm.accounting.events import MechanismEvent, pld_epsilon
from privlm.accounting.orders import DEFAULT_ORDERS
from privlm.errors import AccountingError

AccountantName = Literal["rdp", "prv"]
ACCOUNTANTS: tuple[str, ...] = ("rdp", "prv")


@dataclass(frozen=True)
class DpSgdPlan:
    """The mechanism DP-SGD runs: ``steps`` Poisson-subsampled Gaussian steps."""

    noise_multiplier: float
    sample_rate: float
    steps: int

    def __post_init__(self) -> None:
        if not (self.noise_multiplier > 0 and math.isfinite(self.noise_multiplier)):
            raise AccountingError(
                f"the noise multiplier σ must be positive, got {self.noise_multiplier!r}"
            )
        if not (0.0 < self.sample_rate <= 1.0):
            raise AccountingError(f"the sample rate q must lie in (0, 1], got {self.sample_rate!r}")
        if int(self.steps) != self.steps or self.steps < 1:
            raise AccountingError(f"steps must be a positive integer, got {self.steps!r}")

    def rdp_curve(self) -> RdpCurve:
        values = subsampled_gaussian_rdp(
            self.sample_rate, self.noise_multiplier, DEFAULT_ORDERS, steps=int(self.steps)
        )
        return RdpCurve.from_arrays(DEFAULT_ORDERS, values)

    def event(self) -> MechanismEvent:
        """The same plan as a mechanism event, for PLD composition."""
        return MechanismEvent.poisson_gaussian(self.noise_multiplier, self.sample_rate, self.steps)


@dataclass(frozen=True)
class EpsilonReport:
    """ε of a DP-SGD plan at δ, with the accountant that computed it."""

    epsilon: float
    delta: float
    accountant: str
    order: float | None
    noise_multiplier: float
    sample_rate: float
    steps: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _check_accountant(accountant: str) -> None:
    if accountant not in ACCOUNTANTS:
        raise AccountingError(f"unknown accountant {accountant!r}; choose one of {ACCOUNTANTS}")


def dpsgd_epsilon(
    noise_multiplier: float,
    sample_rate: float,
    steps: int,
    delta: float,
    accountant: str = "rdp",
) -> EpsilonReport:
    """ε after ``steps`` DP-SGD steps at noise σ and Poisson sample rate q, at δ."""
    _check_accountant(accountant)
    d = check_delta(delta)
    plan = DpSgdPlan(float(noise_multiplier), float(sample_rate), steps)
    if accountant == "rdp":
        conv = plan.rdp_curve().to_dp(d)
        eps, order = conv.epsilon, conv.order
    else:
        eps, order = pld_epsilon((plan.event(),), d), None
    return EpsilonReport(
        eps, d, accountant, order, plan.noise_multiplier, plan.sample_rate, int(plan.steps)
    )


@dataclass(frozen=True)
class Calibration:
    """The smallest σ found (to ``rel_tol``) whose ε at δ does not exceed the target."""

    noise_multiplier: float
    epsilon: float
    target_epsilon: float
    delta: float
    sample_rate: float
    steps: int
    accountant: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@lru_cache(maxsize=512)  # the same settings are calibrated again by each run and statement
def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str = "rdp",
    rel_tol: float = 1e-4,
    max_sigma: float = 1e4,
) -> Calibration:
    """σ for a target (ε, δ) at sample rate q over ``steps`` steps, by bisection.

    The returned σ always satisfies ε(σ) ≤ target (it is the upper end of the final
    bracket); it exceeds the smallest such σ by at most ``rel_tol`` relative.
    """
    if not (target_epsilon > 0 and math.isfinite(target_epsilon)):
        raise AccountingError(f"the target ε must be positive and finite, got {target_epsilon!r}")
    _check_accountant(accountant)
    d = check_delta(delta)
    DpSgdPlan(1.0, float(sample_rate), steps)  # validates q and steps

    def eps(sigma: float) -> float:
        return dpsgd_epsilon(sigma, sample_rate, steps, d, accountant).epsilon

    def fits(sigma: float) -> bool:
        """ε(σ) ≤ target (for RDP, on the fewest orders that decide it)."""
        if accountant == "rdp":
            return _rdp_fits(sigma, sample_rate, steps, d, target_epsilon)
        return eps(sigma) <= target_epsilon

    hi = 1.0
    while not fits(hi):
        hi *= 2.0
        if hi > max_sigma:
            raise AccountingError(
                f"no noise multiplier up to {max_sigma:g} reaches ε ≤ {target_epsilon} at "
                f"δ = {d} with q = {sample_rate} over {steps} steps"
            )
    lo = hi / 2.0
    while fits(lo):
        hi, lo = lo, lo / 2.0
        if lo < 1e-6:
            break
    while (hi - lo) / hi > rel_tol:
        mid = 0.5 * (lo + hi)
        if fits(mid):
            hi = mid
        else:
            lo = mid
    return Calibration(
        hi, eps(hi), float(target_epsilon), d, float(sample_rate), int(steps), accountant
    )


_INTEGER_ORDERS = tuple(a for a in DEFAULT_ORDERS if float(a).is_integer())
_FRACTIONAL_ORDERS = tuple(a for a in DEFAULT_ORDERS if not float(a).is_integer())


def _rdp_fits(
    sigma: float, sample_rate: float, steps: int, delta: float, target_epsilon: float
) -> bool:
    """Whether the RDP curve on :data:`DEFAULT_ORDERS` converts to ε ≤ target at δ, computing
    as few fractional orders as that question needs.

    Integer orders have a closed-form sum (Mironov et al. 2019); a fractional order runs
    Opacus's slow series. The conversion takes the best order, so the answer is yes as soon
    as any sub-grid fits. A fractional order α is only computed when it could fit: RDP is
    non-decreasing in the order (Rényi divergences are), so ρ(α) ≥ ρ(⌊α⌋) and Theorem C.3 at
    α with ρ(⌊α⌋) in place of ρ(α) is a lower bound on its ε; an order whose lower bound
    exceeds the target cannot fit. Leaving an order out can only make the answer no, a
    larger σ: never a σ whose ε exceeds the target.
    """
    ints = subsampled_gaussian_rdp(sample_rate, sigma, _INTEGER_ORDERS, steps=int(steps))
    if balle_epsilon(_INTEGER_ORDERS, ints, delta).epsilon <= target_epsilon:
        return True
    at_int = dict(zip(_INTEGER_ORDERS, ints.tolist(), strict=True))
    frac = np.asarray(_FRACTIONAL_ORDERS)
    floor_rdp = np.asarray([at_int.get(float(math.floor(a)), 0.0) for a in _FRACTIONAL_ORDERS])
    lower = balle_per_order(frac, floor_rdp, delta)
    candidates = tuple(float(a) for a in frac[lower <= target_epsilon])
    if not candidates:
        return False
    values = subsampled_gaussian_rdp(sample_rate, sigma, candidates, steps=int(steps))
    return balle_epsilon(candidates, values, delta).epsilon <= target_epsilon
