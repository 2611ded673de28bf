"""``privlm plan``: size a private-prediction deployment before serving it."""

from __future__ import annotations

import typer

from privlm.accounting.analysis import pmixed as analysis
from privlm.cli.common import JSON_OPTION, emit_json, user_errors
from privlm.config import option
from privlm.predict.config import PMixEDConfig

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
    as_json: bool = JSON_OPTION,
) -> None:
    """Per-query RDP budget, the RD-ball radius privlm uses, and the relation it is for."""
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
