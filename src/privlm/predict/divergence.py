"""Rényi divergences between next-token distributions, batched over rows, in log space."""

from __future__ import annotations

import torch


def renyi_divergence(log_p: torch.Tensor, log_q: torch.Tensor, alpha: float) -> torch.Tensor:
    """D_α(P ‖ Q) = log Σ_y p(y)^α q(y)^{1−α} / (α − 1) over the last axis.

    Inputs are log-probabilities; tokens with p = 0 contribute nothing, tokens with
    p > 0 = q give +∞.
    """
    terms = alpha * log_p + (1.0 - alpha) * log_q
    terms = torch.where(torch.isneginf(log_p), torch.full_like(terms, -torch.inf), terms)
    return torch.logsumexp(terms, dim=-1).clamp_min(0.0) / (alpha - 1.0)


def symmetric_renyi(log_p: torch.Tensor, log_q: torch.Tensor, alpha: float) -> torch.Tensor:
    """D↔_α(P ‖ Q) = max(D_α(P ‖ Q), D_α(Q ‖ P))."""
    forward = renyi_divergence(log_p, log_q, alpha)
    return torch.maximum(forward, renyi_divergence(log_q, log_p, alpha))


def log_mix(lam: torch.Tensor, log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """log(λ p + (1 − λ) q), with λ broadcast over the last axis."""
    lam = lam.unsqueeze(-1)
    a = torch.log(lam) + log_p
    b = torch.log1p(-lam) + log_q
    return torch.logaddexp(a, b)
