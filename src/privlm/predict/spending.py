"""How a per-token budget is spent, said the way a user reads it.

An (ε, δ) figure read off Rényi DP (Mironov 2017, Proposition 3) carries a fixed cost of
about log(1/δ)/(α − 1) from the first token on, and grows little after it: at PMixED's
defaults (α = 3, δ = 1e-5), 24 of 1,024 tokens already show ε ≈ 4.9 of 8. Wherever privlm
prints a prediction budget (CLI, quickstart, the page, the API's budget) it puts the tokens
left beside ε and one line that says why ε grows fast at first, from these figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from privlm.accounting.curves import RdpCurve


@dataclass(frozen=True)
class Spending:
    """ε after the first token and what each later token adds on average, for a budget of
    ``epsilon`` over ``tokens`` tokens."""

    first_token_epsilon: float
    later_token_epsilon: float

    @classmethod
    def of(cls, first: RdpCurve, delta: float, epsilon: float, tokens: int) -> Spending:
        """``first``: the RDP cost up to and including the first token (for screened PMixED,
        its first instance too); ``epsilon``: the (ε, δ) of all ``tokens`` together."""
        eps1 = first.to_dp(delta).epsilon
        later = max(epsilon - eps1, 0.0) / (tokens - 1) if tokens > 1 else 0.0
        return cls(eps1, later)

    def view(self) -> dict[str, float]:
        return {
            "first_token_epsilon": self.first_token_epsilon,
            "later_token_epsilon": self.later_token_epsilon,
        }


def why_epsilon_grows_fast(growth: dict[str, float]) -> str:
    """The one line printed beside a partly spent budget."""
    return (
        f"ε grows fast at first: the first token alone shows ε "
        f"{growth['first_token_epsilon']:.3g} (converting Rényi DP to (ε, δ) costs about "
        f"log(1/δ)/(α−1) once), each later token adds about "
        f"{growth['later_token_epsilon']:.2g}"
    )


def rdp_budget_line(spent: dict[str, Any], total: dict[str, Any]) -> str:
    """SubMix's line: Rényi ε per part at its order, spent of budget and left, with the
    (ε, δ) each converts to beside it; never a per-unit figure."""
    used, cap = spent.get("rdp_epsilon", 0.0), total.get("rdp_epsilon")
    if cap is None:
        return f"RDP ε spent {used:.4g} per part"
    order = total.get("order")
    line = f"RDP ε spent {used:.4g} of {cap:g} at order α={order:g} per part (a part removed)"
    dp, whole = spent.get("as_dp"), total.get("as_dp")
    if dp and whole:
        line += (
            f", as (ε, δ): {dp['epsilon']:.4g} of {whole['epsilon']:.4g} at δ={whole['delta']:g}"
        )
    return f"{line}; RDP ε {max(cap - used, 0.0):.4g} left; not a per-unit guarantee"


def budget_line(budget: dict[str, Any]) -> str:
    """``ε spent x of y (δ=…); k of T private tokens left`` and, where the mechanism
    reports it, why ε grows fast at first: from a predictor's ``budget()``."""
    spent, total = budget.get("spent", {}), budget.get("budget", {})
    queries = budget.get("queries", {})
    if "epsilon" not in spent:  # SubMix: Rényi DP per part, said by its own note
        return rdp_budget_line(spent, total)
    line = f"ε spent {spent['epsilon']:.4g} of {total['epsilon']:g} (δ={total['delta']:g})"
    if queries.get("left") is not None:
        line += f"; {queries['left']} of T={queries['total']} private tokens left"
    if budget.get("growth") and 0 < queries.get("used", 0) < queries.get("total", 0):
        line += f". {why_epsilon_grows_fast(budget['growth'])}"
    return line
