"""``privlm account``: privacy accounting from the command line."""

from __future__ import annotations

import typer

from privlm.cli.common import JSON_OPTION, emit_json, user_errors

app = typer.Typer(help="Privacy accounting: ε of a plan, σ for a target ε.", no_args_is_help=True)

ACCOUNTANT_OPTION = typer.Option(
    "rdp", "--accountant", help="rdp (Rényi DP, Theorem C.3 conversion) or prv (tighter)."
)


@app.command("dpsgd")
@user_errors
def dpsgd(
    noise_multiplier: float = typer.Option(
        ..., "--noise-multiplier", help="σ, noise std / clip norm."
    ),
    sample_rate: float = typer.Option(..., "--sample-rate", help="Poisson sampling rate q."),
    steps: int = typer.Option(..., "--steps", help="Number of DP-SGD steps."),
    delta: float = typer.Option(..., "--delta", help="Target δ."),
    accountant: str = ACCOUNTANT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """ε spent by DP-SGD (Poisson-subsampled Gaussian, add/remove-one neighbours)."""
    from privlm.accounting import dpsgd_epsilon  # here: --help and errors need no SciPy

    report = dpsgd_epsilon(noise_multiplier, sample_rate, steps, delta, accountant)
    if as_json:
        emit_json(report.to_dict())
        return
    order = "" if report.order is None else f" (best Rényi order α = {report.order:g})"
    typer.echo(
        f"ε = {report.epsilon:.6g} at δ = {report.delta:g}{order}, accountant {report.accountant}"
        f"\n  σ = {report.noise_multiplier:g}, q = {report.sample_rate:g}, steps = {report.steps}"
    )


@app.command("calibrate")
@user_errors
def calibrate(
    epsilon: float = typer.Option(..., "--epsilon", help="Target ε."),
    delta: float = typer.Option(..., "--delta", help="Target δ."),
    sample_rate: float = typer.Option(..., "--sample-rate", help="Poisson sampling rate q."),
    steps: int = typer.Option(..., "--steps", help="Number of DP-SGD steps."),
    accountant: str = ACCOUNTANT_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """The noise multiplier σ that meets (ε, δ); its ε never exceeds the target."""
    from privlm.accounting import calibrate_noise_multiplier

    cal = calibrate_noise_multiplier(epsilon, delta, sample_rate, steps, accountant)
    if as_json:
        emit_json(cal.to_dict())
        return
    typer.echo(
        f"σ = {cal.noise_multiplier:.6g} gives ε = {cal.epsilon:.6g} ≤ {cal.target_epsilon:g} "
        f"at δ = {cal.delta:g} (q = {cal.sample_rate:g}, {cal.steps} steps, {cal.accountant})"
    )


@app.command("gnmax")
@user_errors
def gnmax(
    votes: str = typer.Option(..., "--votes", help="Vote counts per class, e.g. 380,20."),
    threshold: float = typer.Option(..., "--threshold", help="Confident-GNMax threshold T."),
    sigma_threshold: float = typer.Option(
        ..., "--sigma-threshold", help="σ1, the noise of the threshold check."
    ),
    sigma: float = typer.Option(..., "--sigma", help="σ2, the noise of GNMax."),
    delta: float = typer.Option(..., "--delta", help="Target δ."),
    queries: int = typer.Option(1, "--queries", help="How many such queries (K)."),
    as_json: bool = JSON_OPTION,
) -> None:
    """ε of K identical Confident-GNMax queries (data-dependent RDP, Papernot et al. 2018)."""
    try:
        counts = [int(x) for x in votes.split(",")]
    except ValueError:
        raise typer.BadParameter(
            "--votes takes integers separated by commas, e.g. 380,20"
        ) from None
    from privlm.accounting import plan_gnmax

    plan = plan_gnmax(counts, threshold, sigma_threshold, sigma, delta, queries)
    if as_json:
        emit_json(plan.to_dict())
        return
    typer.echo(
        f"{queries} queries on votes {list(plan.votes)}: ε = {plan.epsilon:.6g} at δ = {delta:g} "
        f"if every one is answered (Rényi order {plan.order:g}); "
        f"{plan.epsilon_unanswered:.6g} if none is"
        f"\n  Pr[answered] = {plan.pr_answered:.4g}, Pr[GNMax ≠ plurality] ≤ {plan.pr_not_argmax:.3g}"
        "\n  (data-dependent: the ε depends on the votes)"
    )
