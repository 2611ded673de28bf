"""What ``privlm plan <mechanism>`` shows: a deployment's budget sized before it serves, as
a dict whose ``lines`` are for people (the rest for ``--json``). Each mechanism's record in
:mod:`privlm.predict.mechanisms` names its planner. Torch-free."""

from __future__ import annotations

from typing import Any

from privlm.accounting.analysis import pmixed as analysis
from privlm.accounting.statements import guarantee_text
from privlm.predict.config import PMixEDConfig, ScreenedPMixEDConfig, SubMixConfig

PAPER_SIZES = 10  # the paper's per-size β* is shown for subsets of 1..10 models


def plan_pmixed(cfg: PMixEDConfig, n: int) -> dict[str, Any]:
    """Per-query RDP budget, the RD-ball radius privlm uses and the relation it is for, and
    the paper's per-part radii and β* for comparison only."""
    per_query, q, a, cap = cfg.per_query_rdp, cfg.sample_rate, cfg.alpha, cfg.lambda_cap
    radius = analysis.solve_radius(per_query, a, n, q, bound=cfg.bound, lambda_cap=cap)
    uncapped = radius if cap == 1 else analysis.solve_radius(per_query, a, n, q, bound=cfg.bound)
    per_part = {
        b: analysis.solve_radius(per_query, a, n, q, bound=b) for b in analysis.PER_PART_BOUNDS
    }
    out: dict[str, Any] = {
        "mechanism": "pmixed", "epsilon": cfg.epsilon, "delta": cfg.delta, "alpha": a,
        "queries": cfg.queries, "sample_rate": q, "ensemble_size": n,
        "rdp_budget": per_query * cfg.queries, "per_query_rdp_budget": per_query,
        "ball_order": analysis.ball_order(a), "bound": cfg.bound,
        "relation": analysis.relation(cfg.bound), "per_unit": analysis.is_per_unit(cfg.bound),
        "radius": radius, "lambda_cap": cap, "radius_without_cap": uncapped,
        "member_weight": analysis.replacement_weight(n, q),
        "per_part_radius_for_comparison": per_part,
        "per_query_rdp_charged": analysis.query_rdp(radius, a, n, q, cfg.bound, cap),
        "paper_theorem51_beta_no_subsampling": analysis.paper_theorem51_beta(per_query, a, n),
        "paper_beta_at_realised_size": {
            m: analysis.paper_realised_size_beta(per_query, a, m, q)
            for m in range(1, PAPER_SIZES + 1)
        },
    }  # fmt: skip
    scope = "per unit" if out["per_unit"] else "PER PART ONLY (not a per-unit guarantee)"
    out["lines"] = [
        f"PMixED: (ε={cfg.epsilon:g}, δ={cfg.delta:g}) over T={cfg.queries} queries, {scope} = "
        f"RDP {out['rdp_budget']:.4g} at α={a}",
        f"  neighbouring relation: {out['relation']}",
        f"  per-query RDP budget ε_G/T = {per_query:.4g}; charged per query "
        f"{out['per_query_rdp_charged']:.4g}",
        f"  RD ball at order 2α = {2 * a}: radius ρ* = {radius:.4g} (N = {n}, q = {q:g}, "
        f"{cfg.bound} bound; one member's weight in a release w = {out['member_weight']:.4g})",
        *(
            [f"  λ capped at {cap:g}: every member keeps at least {1 - cap:.3g} of the public model; "
             f"without the cap ρ* = {uncapped:.4g}"]
            if cap < 1 else []
        ),
        "  for comparison only, the paper's per-part relation (one member added or removed) "
        "would allow " + ", ".join(f"ρ = {r:.4g} ({b})" for b, r in per_part.items())
        + "; privlm never charges a per-unit ledger with it",
        "  see docs/sharp_edges.md, 'PMixED per unit'",
    ]  # fmt: skip
    return out


def plan_screened(cfg: ScreenedPMixEDConfig, n: int) -> dict[str, Any]:
    """c paid tokens, their radius, the sparse-vector test's noise, and plain PMixED over the
    same c tokens for comparison (docs/sharp_edges.md, "Screened PMixED")."""
    radius, curve = cfg.query_cost(n)
    test = cfg.screen(n)
    plain = PMixEDConfig(
        epsilon=cfg.epsilon, delta=cfg.delta, alpha=cfg.alpha, queries=cfg.paid_tokens,
        sample_rate=cfg.sample_rate,
    )  # fmt: skip
    out: dict[str, Any] = {
        "mechanism": "screened-pmixed",
        "epsilon": cfg.epsilon, "delta": cfg.delta, "alpha": cfg.alpha,
        "ensemble_size": n, "sample_rate": cfg.sample_rate,
        "paid_tokens": cfg.paid_tokens, "free_tokens": "unbounded",
        "relation": analysis.relation(analysis.REPLACEMENT),
        "radius": radius,
        "per_paid_query_rdp": float(curve.at([float(cfg.alpha)])[0]),
        "instance_epsilon": test.epsilon,
        "instance_rdp": float(cfg.instance_curve().at([float(cfg.alpha)])[0]),
        "score_sensitivity": test.sensitivity,
        "threshold": cfg.threshold,
        "laplace_scales": {"threshold": test.threshold_scale, "score": test.query_scale},
        "lifetime_epsilon": cfg.lifetime_curve(n).to_dp(cfg.delta).epsilon,
        "plain_pmixed_radius_same_c": plain.query_cost(n)[0],
    }  # fmt: skip
    lines = [
        f"Screened PMixED: (ε={cfg.epsilon:g}, δ={cfg.delta:g}) per unit over c="
        f"{cfg.paid_tokens} paid tokens and any number of free ones (N = {n})",
        f"  neighbouring relation: {out['relation']}",
        f"  paid query: RD-ball radius ρ* = {radius:.4g} (q = {cfg.sample_rate:g}; plain "
        f"PMixED over the same {cfg.paid_tokens} tokens: ρ* = "
        f"{out['plain_pmixed_radius_same_c']:.4g})",
        f"  sparse-vector test: ε′ = {test.epsilon:.4g} per instance (one per paid token), "
        f"score TV(ensemble average, public) of sensitivity 1/N = {test.sensitivity:.4g}",
        f"  threshold τ = {cfg.threshold:g} + Lap({test.threshold_scale:.4g}); score + "
        f"Lap({test.query_scale:.4g})",
    ]
    if test.query_scale >= 0.25:
        lines.append(
            "  warning: the score's noise is wide against its range [0, 1], so the screen "
            "sorts queries little better than a coin: raise ε or N, or lower c"
        )
    out["lines"] = [*lines, "  see docs/sharp_edges.md, 'Screened PMixED'"]
    return out


def plan_submix(cfg: SubMixConfig, n: int) -> dict[str, Any]:
    """Each part's RDP budget, the β each query aims at, and the (ε, δ) the budget converts
    to; per part, never per unit."""
    as_dp = cfg.lifetime_curve().to_dp(cfg.delta).epsilon
    out: dict[str, Any] = {
        "mechanism": "submix", "epsilon": cfg.epsilon, "alpha": cfg.alpha, "beta": cfg.beta,
        "delta": cfg.delta, "parts": n // 2,
        "relation": "per part: one part removed (operational privacy); not per unit",
        "queries_at_beta": cfg.epsilon / cfg.beta, "as_dp_epsilon": as_dp,
    }  # fmt: skip
    out["lines"] = [
        f"SubMix: (α={cfg.alpha:g}, ε={cfg.epsilon:g})-Rényi operational privacy per part "
        f"({n // 2} parts of two halves), about {guarantee_text(as_dp, cfg.delta, 'part')}",
        f"  neighbouring relation: {out['relation']}",
        f"  target leakage β = {cfg.beta:.4g} per query: about {out['queries_at_beta']:.0f} "
        "queries at β before STOP (each query is charged its measured leakage)",
        "  see docs/sharp_edges.md, 'SubMix'",
    ]
    return out
