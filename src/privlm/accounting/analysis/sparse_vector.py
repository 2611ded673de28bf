"""The sparse-vector technique behind screened PMixED: tokens the public model predicts as
the ensemble would are released from the public model, and cost only a share of one
sparse-vector instance; the others are paid PMixED queries.

**The test (AboveThreshold, Dwork & Roth 2014, Algorithm 1 and Theorem 3.23).** An instance
draws a threshold noise ρ ~ Lap(2Δ/ε′) once; query j draws ν_j ~ Lap(4Δ/ε′) and answers ⊤
("above": pay) when f_j(D) + ν_j ≥ τ + ρ, else ⊥ ("below": free); the instance halts at its
first ⊤. For queries of sensitivity Δ (not necessarily monotone), every run of ⊥ answers and
the ⊤ that ends it are together ε′-DP, for any number of queries, chosen adaptively. privlm
starts a new instance, with a fresh threshold noise, after each ⊤ (the "Sparse" algorithm,
Dwork & Roth §3.6), so c paid tokens use c instances.

**The score and its sensitivity, per unit.** With p_1..p_N the members' next-token
distributions and p₀ the public model's, the score is s = TV(p̄, p₀) with p̄ = (1/N)Σ p_i:
how far the ensemble's average is from the public model. In privlm's keyed-hash ensemble
one privacy unit more or less replaces one member's model (docs/sharp_edges.md, "PMixED per
unit"): p̄ moves to p̄′ = p̄ + (p_i′ − p_i)/N, so TV(p̄, p̄′) ≤ 1/N, and by the triangle
inequality |TV(p̄, p₀) − TV(p̄′, p₀)| ≤ TV(p̄, p̄′) ≤ 1/N. Hence Δ = 1/N.

**In Rényi DP.** An ε′-DP mechanism is (ε′²/2)-zCDP (Bun & Steinke 2016, Proposition 3.3), so
(α, α·ε′²/2)-RDP at every α > 1, and it is (α, ε′)-RDP too; one instance costs
min(ε′, α·ε′²/2) at order α. A screened deployment with c paid tokens composes c instances
and c paid PMixED queries (each per unit, :func:`privlm.accounting.analysis.pmixed.
replacement_rdp`); the composition is adaptive and concurrent (the scores and the paid
queries read the tokens released before them), which RDP composition covers (Lyu 2022,
concurrent composition of RDP interactive mechanisms), so the whole deployment is
(α, c·(min(ε′, αε′²/2) + ε_q(α)))-RDP for an unbounded number of free tokens.
docs/sharp_edges.md ("Screened PMixED") states the proof, and why this score is too noisy
to screen at N = 80 (no predictor uses it yet); tests/accounting/test_sparse_vector.py checks
it against exact computations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from privlm.errors import AccountingError


def score_sensitivity(n_models: int) -> float:
    """Δ of the score TV(p̄, p₀) when one member's model is replaced: 1/N."""
    if n_models < 1:
        raise AccountingError("screening needs at least one ensemble member")
    return 1.0 / n_models


def screening_score(members: ArrayLike, public: ArrayLike) -> NDArray[np.float64]:
    """TV(p̄, p₀) of each row: ``members`` (…, N, V) and ``public`` (…, V), probabilities.
    In float64: the noise scale is 4/(N·ε′), and the score must not round toward the
    threshold."""
    p = np.asarray(members, dtype=np.float64)
    p0 = np.asarray(public, dtype=np.float64)
    return np.asarray(0.5 * np.abs(p.mean(axis=-2) - p0).sum(axis=-1), dtype=np.float64)


@dataclass(frozen=True)
class AboveThreshold:
    """One instance's noise scales for queries of sensitivity Δ at ε′ (Dwork & Roth,
    Algorithm 1): the threshold's Lap(2Δ/ε′), each query's Lap(4Δ/ε′)."""

    epsilon: float
    sensitivity: float

    def __post_init__(self) -> None:
        if not (self.epsilon > 0 and math.isfinite(self.epsilon)):
            raise AccountingError(f"a sparse-vector instance needs ε′ > 0, got {self.epsilon!r}")
        if not (self.sensitivity > 0 and math.isfinite(self.sensitivity)):
            raise AccountingError(f"the score's sensitivity must be > 0, got {self.sensitivity!r}")

    @property
    def threshold_scale(self) -> float:
        return 2.0 * self.sensitivity / self.epsilon

    @property
    def query_scale(self) -> float:
        return 4.0 * self.sensitivity / self.epsilon


def instance_rdp(epsilon: float, orders: Sequence[float]) -> NDArray[np.float64]:
    """RDP of one ε′-DP instance at each order: min(ε′, α·ε′²/2) (Bun & Steinke 2016)."""
    if not (epsilon > 0 and math.isfinite(epsilon)):
        raise AccountingError(f"a sparse-vector instance needs ε′ > 0, got {epsilon!r}")
    a = np.asarray(orders, dtype=np.float64)
    if np.any(a <= 1):
        raise AccountingError("Rényi orders must exceed 1")
    return np.asarray(np.minimum(epsilon, a * epsilon**2 / 2.0), dtype=np.float64)


def instance_epsilon_for(rdp_at_alpha: float, alpha: float) -> float:
    """The largest ε′ whose instance costs at most ``rdp_at_alpha`` at order α."""
    if not (rdp_at_alpha > 0 and alpha > 1):
        raise AccountingError("an instance needs a positive RDP budget at an order above 1")
    if rdp_at_alpha <= 2.0 / alpha:  # below ε′ = 2/α the zCDP bound is the smaller
        return math.sqrt(2.0 * rdp_at_alpha / alpha)
    return float(rdp_at_alpha)


def split_budget(rdp_budget: float, paid: int, alpha: int, svt_share: float) -> tuple[float, float]:
    """(ε′ of each instance, the per-query RDP budget) when ``svt_share`` of the order-α
    RDP budget goes to the ``paid`` instances and the rest to the ``paid`` queries."""
    if paid < 1:
        raise AccountingError("a screened deployment needs at least one paid token")
    if not 0.0 < svt_share < 1.0:
        raise AccountingError(f"the sparse-vector share must lie in (0, 1), got {svt_share!r}")
    if not rdp_budget > 0:
        raise AccountingError("the RDP budget must be positive")
    per_token = rdp_budget / paid
    return instance_epsilon_for(svt_share * per_token, alpha), (1.0 - svt_share) * per_token
