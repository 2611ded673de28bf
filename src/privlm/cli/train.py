"""``privlm train``: private fine-tuning."""

from __future__ import annotations

from pathlib import Path

import typer

from privlm.accounting import Budget, DpSgdPlan, PrivacyLedger
from privlm.cli.common import JSON_OPTION, emit_json, user_errors
from privlm.cli.ensemble import load_training_data
from privlm.errors import AccountingError
from privlm.models import DEFAULT_MODEL
from privlm.training.dpsgd import DpSgdConfig, examples_per_unit, plan, train_dpsgd

app = typer.Typer(help="Private fine-tuning.", no_args_is_help=True)


@app.command("dpsgd")
@user_errors
def dpsgd(
    data: str = typer.Argument(..., help="A .txt/.jsonl/.csv file, or wikitext2[:split]."),
    out: Path = typer.Option(..., "--out", help="Where to write the adapter and privacy.json."),
    epsilon: float | None = typer.Option(3.0, help="Target ε (σ is calibrated to meet it)."),
    noise_multiplier: float | None = typer.Option(None, help="Fixed σ instead of a target ε."),
    delta: float | None = typer.Option(None, help="δ (default 1/n^1.1, n privacy units)."),
    max_grad_norm: float = typer.Option(1.0, help="Per-example clipping norm."),
    batch_size: int = typer.Option(64, help="Expected logical (Poisson) batch size."),
    physical_batch_size: int = typer.Option(8, help="Examples per forward pass (memory)."),
    epochs: int = typer.Option(1, help="Epochs."),
    learning_rate: float = typer.Option(4e-4, "--lr", help="AdamW learning rate."),
    block_size: int = typer.Option(128, help="Tokens per example (longer are cut)."),
    accountant: str = typer.Option("rdp", help="rdp or prv."),
    model: str = typer.Option(DEFAULT_MODEL, help="Public model."),
    limit: int | None = typer.Option(None, help="Use only the first LIMIT privacy units."),
    seed: int = typer.Option(0, help="Seed."),
    ledger: Path = typer.Option(
        Path("privlm-ledger.db"), help="Budget ledger charged before the adapter is written."
    ),
    ledger_name: str = typer.Option("dpsgd", help="Ledger name (one per dataset)."),
    budget_epsilon: float | None = typer.Option(
        None, help="Budget ε of a new ledger (default: what this run costs)."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Fine-tune a LoRA adapter with DP-SGD (Opacus); print its privacy statement."""
    ds = load_training_data(data, limit)
    cfg = DpSgdConfig(
        target_epsilon=None if noise_multiplier is not None else epsilon,
        delta=delta,
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        batch_size=batch_size,
        physical_batch_size=physical_batch_size,
        epochs=epochs,
        learning_rate=learning_rate,
        block_size=block_size,
        accountant=accountant,
        seed=seed,
    )
    q, steps, run_delta, sigma = plan(len(examples_per_unit(ds)[0]), cfg)
    # a new ledger's default budget is what this run costs, as the ledger composes it (RDP)
    run_cost = DpSgdPlan(sigma, q, steps).rdp_curve().to_dp(run_delta).epsilon
    budget = Budget(budget_epsilon if budget_epsilon is not None else run_cost, run_delta)
    led = (
        PrivacyLedger(ledger, ledger_name)
        if _ledger_exists(ledger, ledger_name)
        else PrivacyLedger(ledger, ledger_name, budget)
    )
    st = train_dpsgd(model, ds, out, cfg, progress=not as_json, ledger=led)
    if as_json:
        emit_json(st.to_dict())
        return
    typer.echo(
        f"adapter in {out}: ({st.epsilon:.4g}, {st.delta:.3g})-DP per {st.unit} ({st.accountant}); "
        f"σ = {st.noise_multiplier:.4g}, q = {st.sample_rate:.4g}, {st.steps} steps, clip {st.max_grad_norm:g}"
    )


def _ledger_exists(path: Path, name: str) -> bool:
    if not path.is_file():
        return False
    try:
        PrivacyLedger(path, name)
    except AccountingError:
        return False
    return True
