"""One PMixED release, as a function of distributions (Algorithm 1 of the PMixED paper).

Given the next-token distributions of the Poisson-sampled models and of the public model:
mollify each model toward p₀ inside the RD ball (Eq. 5, at order 2α and radius ρ: see
:mod:`privlm.accounting.analysis.pmixed`), then average the mixtures. An empty sample means
the public model answers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from privlm.accounting.analysis.pmixed import ball_order
from privlm.predict.divergence import log_mix
from privlm.predict.mollifier import LAMBDA_TOL, pmixed_lambdas
from privlm.randomness import PrivacyRandomness


@dataclass(frozen=True)
class PMixedMixture:
    log_probs: torch.Tensor  # (V,) float64
    lambdas: torch.Tensor  # (m,)


def sample_subset(rng: PrivacyRandomness, n_models: int, sample_rate: float) -> torch.Tensor:
    """Poisson subsampling: each model independently with probability q (§5.2).

    Never sampling with replacement: Theorem C.4's amplification assumes this scheme, and
    that the subset stays secret, so the coins come from the CSPRNG unless seeded.
    """
    return torch.from_numpy(np.flatnonzero(rng.bernoulli(n_models, sample_rate)))


def pmixed_mixture(
    log_p: torch.Tensor, log_p0: torch.Tensor, alpha: int, radius: float, tol: float = LAMBDA_TOL
) -> PMixedMixture:
    """(1/|S|) Σ_{i∈S} λ_i p_i + (1 − λ_i) p₀ for the rows of ``log_p`` (shape (|S|, V))."""
    x0 = log_p0.double()
    if log_p.shape[0] == 0:
        return PMixedMixture(x0, torch.zeros(0, dtype=torch.float64))
    lam = pmixed_lambdas(log_p, x0, ball_order(alpha), radius, tol)
    mixed = log_mix(lam, log_p.double(), x0.expand(log_p.shape[0], -1))
    log_avg = torch.logsumexp(mixed, dim=0) - torch.log(torch.tensor(float(log_p.shape[0])))
    return PMixedMixture(log_avg, lam)
