"""One PMixED release, as a function of distributions (Algorithm 1 of the PMixED paper).

Given the next-token distributions of the ensemble's members and of the public model, and
the Poisson-sampled members S: mollify each member toward p₀ inside the RD ball (Eq. 5, at
order 2α and radius ρ: see :mod:`privlm.accounting.analysis.pmixed`), then average the
mixtures of S. An empty S means the public model answers.

**The work does not depend on S.** S is secret: the per-unit charge is amplified by it
(docs/sharp_edges.md, "PMixED per unit"), and a release whose duration told S = ∅ from
S ≠ ∅ would lose up to 2.3× the charge at privlm's former defaults. So λ is solved for
every member at every query (it depends on p_i and p₀ only), and the average is one
weighted sum over every member with weight 1/|S| on S and 0 elsewhere (p₀ alone when S is
empty): the same operations, on the same shapes, whatever S is
(tests/predict/test_pmixed_constant_work.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from privlm.accounting.analysis.pmixed import ball_order
from privlm.predict.mollifier import LAMBDA_TOL, pmixed_lambdas
from privlm.randomness import PrivacyRandomness


@dataclass(frozen=True)
class PMixedMixture:
    log_probs: torch.Tensor  # (V,) float64
    lambdas: torch.Tensor  # (N,): every member's λ, sampled or not


def sample_members(rng: PrivacyRandomness, n_models: int, sample_rate: float) -> torch.Tensor:
    """Poisson subsampling: each model independently with probability q (§5.2), as a boolean
    mask over the N members.

    Never sampling with replacement: Theorem C.4's amplification assumes this scheme, and
    that the subset stays secret, so the coins come from the CSPRNG unless seeded.
    """
    return torch.from_numpy(rng.bernoulli(n_models, sample_rate))


def pmixed_mixture(
    log_p: torch.Tensor,
    log_p0: torch.Tensor,
    alpha: int,
    radius: float,
    members: torch.Tensor | None = None,
    tol: float = LAMBDA_TOL,
    lambda_cap: float = 1.0,
) -> PMixedMixture:
    """(1/|S|) Σ_{i∈S} λ_i p_i + (1 − λ_i) p₀ over the rows of ``log_p`` (shape (N, V)) that
    ``members`` (a boolean mask of N; every row when None) selects; p₀ when S is empty.

    λ_i is Eq. 5's, capped at ``lambda_cap`` (1: the paper's rule): a smaller λ keeps the
    mixture inside the ball (the divergence grows with λ), and the cap is what the per-unit
    bound's floor term reads (:func:`privlm.accounting.analysis.pmixed.public_floor`).
    Every row's λ is solved and every row enters one weighted sum, so the operations are the
    same for every S (module docstring)."""
    x0 = log_p0.double()
    n = log_p.shape[0]
    mask = (
        torch.ones(n, dtype=torch.bool, device=log_p.device)
        if members is None
        else members.to(device=log_p.device, dtype=torch.bool)
    )
    if mask.shape != (n,):
        raise ValueError(f"members must be a mask of the {n} rows, got shape {tuple(mask.shape)}")
    lam = pmixed_lambdas(log_p, x0, ball_order(alpha), radius, tol).clamp(max=lambda_cap)
    weight = mask.double() / mask.sum().clamp_min(1).double()  # 1/|S| on S; all 0 if S = ∅
    c = weight * lam
    p = torch.exp(log_p.double())
    mixed = (1.0 - c.sum()) * x0.exp() + c @ p  # Σ_S (λ_i p_i + (1 − λ_i) p₀)/|S|
    return PMixedMixture(torch.log(mixed), lam)
