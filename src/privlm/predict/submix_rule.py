"""One SubMix step, as a function of distributions (Algorithm 2, lines 6–19, of SubMix).

For each part i the two subpart models give h_i = (h_πi + h_π'i)/2 and λ_i (Eq. 2);
λ* is their mean, h̄ the mean of the h_i, and the release is h = λ* h̄ + (1 − λ*) h₀.
The leakage charged to part i compares h with the aggregate *without part i*,
h' = λ_{−i} h_{−i} + (1 − λ_{−i}) h₀, where λ_{−i} and h_{−i} average the other parts only
(lines 14–17), in both directions (line 18). Removing the only part leaves h₀.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from privlm.predict.divergence import renyi_divergence
from privlm.predict.mollifier import LAMBDA_TOL, submix_lambdas


@dataclass(frozen=True)
class SubMixStep:
    log_probs: torch.Tensor  # (V,) the release distribution h
    lambda_star: float
    lambdas: torch.Tensor  # (k,)
    leakage: torch.Tensor  # (k,) max{D_α(h‖h'), D_α(h'‖h)} per part


def submix_step(
    log_h_a: torch.Tensor,
    log_h_b: torch.Tensor,
    log_h0: torch.Tensor,
    alpha: float,
    beta: float,
    tol: float = LAMBDA_TOL,
) -> SubMixStep:
    """``log_h_a``, ``log_h_b``: (k, V) log-pmfs of the two subpart models of each part."""
    k = log_h_a.shape[0]
    x0 = log_h0.double()
    lam = submix_lambdas(log_h_a, log_h_b, x0, alpha, beta, tol)
    h_parts = 0.5 * (log_h_a.double().exp() + log_h_b.double().exp())  # (k, V)
    lam_star = lam.mean()
    h_bar = h_parts.mean(dim=0)
    p0 = x0.exp()
    h = lam_star * h_bar + (1 - lam_star) * p0
    if k == 1:
        h_minus = p0.unsqueeze(0)
    else:
        lam_minus = (lam.sum() - lam) / (k - 1)  # (k,)
        rest = (h_parts.sum(dim=0, keepdim=True) - h_parts) / (k - 1)  # (k, V)
        h_minus = lam_minus.unsqueeze(1) * rest + (1 - lam_minus).unsqueeze(1) * p0
    log_h = torch.log(h)
    log_h_minus = torch.log(h_minus.clamp_min(0.0))
    lh = log_h.expand_as(log_h_minus)
    leak = torch.maximum(
        renyi_divergence(lh, log_h_minus, alpha), renyi_divergence(log_h_minus, lh, alpha)
    )
    return SubMixStep(log_h, float(lam_star), lam, leak)


__all__ = ["SubMixStep", "submix_step"]
