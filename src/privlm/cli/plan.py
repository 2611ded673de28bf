"""``privlm plan``: size a private-prediction deployment before serving it."""

from __future__ import annotations

import typer

from privlm.accounting.analysis import pmixed as analysis
from privlm.cli.common import JSON_OPTION, emit_json, user_errors
from privlm.config import option
from privlm.predict.config import PMixEDConfig, ScreenedPMixEDConfig

app = typer.Typer(help="Plan private-prediction budgets.", no_args_is_help=True)


@app.command("pmixed")
@user_errors
def plan_pmixed(
    epsilon: float = option(PMixEDConfig, "epsilon"),
    delta: float = option(PMixEDConfig, "delta"),
    alpha: int = option(PMixEDConfig, "alpha"),
    queries: int = option(PMixEDConfig, "queries"),
    sample_rate: float = option(PMixEDConfig, "sample_rate"),
    ensemble_size: int = typer.Option(80, min=1, help="N, the number of models (the paper's 80)."),
    max_subset: int = typer.Option(10, help="Show subset sizes 1..MAX."),
    bound: str = option(PMixEDConfig, "bound"),
    screened: bool = typer.Option(
        False,
        "--screened",
        help="Plan screened PMixED: c paid tokens behind a sparse-vector "
        "screen, free tokens unbounded (--queries is then ignored).",
    ),
    paid_tokens: int = option(ScreenedPMixEDConfig, "paid_tokens"),
    threshold: float = option(ScreenedPMixEDConfig, "threshold"),
    svt_share: float = option(ScreenedPMixEDConfig, "svt_share"),
    as_json: bool = JSON_OPTION,
) -> None:
    """Per-query RDP budget, the RD-ball radius privlm uses, and the relation it is for."""
    if screened:
        screen = ScreenedPMixEDConfig(
            epsilon, delta, alpha, paid_tokens, sample_rate, threshold, svt_share
        )
        _plan_screened(screen, ensemble_size, as_json)
        return
    cfg = PMixEDConfig(epsilon, delta, alpha, queries, sample_rate, bound)
    per_query = cfg.per_query_rdp
    radius = analysis.solve_radius(per_query, alpha, ensemble_size, sample_rate, bound=bound)
    per_part = {
        b: analysis.solve_radius(per_query, alpha, ensemble_size, sample_rate, bound=b)
        for b in analysis.PER_PART_BOUNDS
    }
    out = {
        "epsilon": epsilon,
        "delta": delta,
        "alpha": alpha,
        "queries": queries,
        "sample_rate": sample_rate,
        "ensemble_size": ensemble_size,
        "rdp_budget": per_query * queries,
        "per_query_rdp_budget": per_query,
        "ball_order": analysis.ball_order(alpha),
        "bound": bound,
        "relation": analysis.relation(bound),
        "per_unit": analysis.is_per_unit(bound),
        "radius": radius,
        "member_weight": analysis.replacement_weight(ensemble_size, sample_rate),
        "per_part_radius_for_comparison": per_part,
        "per_query_rdp_charged": analysis.query_rdp(
            radius, alpha, ensemble_size, sample_rate, bound
        ),
        "paper_theorem51_beta_no_subsampling": analysis.paper_theorem51_beta(
            per_query, alpha, ensemble_size
        ),
        "paper_beta_at_realised_size": {
            m: analysis.paper_realised_size_beta(per_query, alpha, m, sample_rate)
            for m in range(1, max_subset + 1)
        },
    }
    if as_json:
        emit_json(out)
        return
    scope = "per unit" if out["per_unit"] else "PER PART ONLY (not a per-unit guarantee)"
    typer.echo(
        f"PMixED: (ε={epsilon:g}, δ={delta:g}) over T={queries} queries, {scope} = RDP "
        f"{out['rdp_budget']:.4g} at α={alpha}"
    )
    typer.echo(f"  neighbouring relation: {out['relation']}")
    typer.echo(
        f"  per-query RDP budget ε_G/T = {per_query:.4g}; charged per query {out['per_query_rdp_charged']:.4g}"
    )
    typer.echo(
        f"  RD ball at order 2α = {2 * alpha}: radius ρ* = {radius:.4g} (N = {ensemble_size}, "
        f"q = {sample_rate:g}, {bound} bound; one member's weight in a release "
        f"w = {out['member_weight']:.4g})"
    )
    typer.echo(
        "  for comparison only, the paper's per-part relation (one member added or removed) "
        "would allow "
        + ", ".join(f"ρ = {r:.4g} ({b})" for b, r in per_part.items())
        + "; privlm never charges a per-unit ledger with it"
    )
    typer.echo("  see docs/sharp_edges.md, 'PMixED per unit'")


def _plan_screened(cfg: ScreenedPMixEDConfig, n: int, as_json: bool) -> None:
    """c paid tokens, their radius, the sparse-vector test's noise, and plain PMixED over the
    same c tokens for comparison (docs/sharp_edges.md, "Screened PMixED")."""
    radius, curve = cfg.query_cost(n)
    test = cfg.screen(n)
    plain = PMixEDConfig(cfg.epsilon, cfg.delta, cfg.alpha, cfg.paid_tokens, cfg.sample_rate)
    out = {
        "mechanism": "screened-pmixed",
        "epsilon": cfg.epsilon, "delta": cfg.delta, "alpha": cfg.alpha,
        "ensemble_size": n, "sample_rate": cfg.sample_rate,
        "paid_tokens": cfg.paid_tokens,
        "free_tokens": "unbounded",
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
    if as_json:
        emit_json(out)
        return
    typer.echo(
        f"Screened PMixED: (ε={cfg.epsilon:g}, δ={cfg.delta:g}) per unit over c="
        f"{cfg.paid_tokens} paid tokens and any number of free ones (N = {n})"
    )
    typer.echo(f"  neighbouring relation: {out['relation']}")
    typer.echo(
        f"  paid query: RD-ball radius ρ* = {radius:.4g} (q = {cfg.sample_rate:g}; plain "
        f"PMixED over the same {cfg.paid_tokens} tokens: ρ* = {out['plain_pmixed_radius_same_c']:.4g})"
    )
    typer.echo(
        f"  sparse-vector test: ε′ = {test.epsilon:.4g} per instance (one per paid token), "
        f"score TV(ensemble average, public) of sensitivity 1/N = {test.sensitivity:.4g}"
    )
    typer.echo(
        f"  threshold τ = {cfg.threshold:g} + Lap({test.threshold_scale:.4g}); score + "
        f"Lap({test.query_scale:.4g})"
    )
    if test.query_scale >= 0.25:
        typer.echo(
            "  warning: the score's noise is wide against its range [0, 1], so the screen "
            "sorts queries little better than a coin: raise ε or N, or lower c"
        )
    typer.echo("  see docs/sharp_edges.md, 'Screened PMixED'")
