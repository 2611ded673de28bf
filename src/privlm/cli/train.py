"""``privlm train``: private fine-tuning."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from privlm.accounting import Budget, DpSgdPlan, PrivacyLedger, dpsgd_epsilon
from privlm.cli.common import (
    CHECKPOINTING_OPTION,
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    NO_HEADER_OPTION,
    SECURE_MODE_OPTION,
    SEED_OPTION,
    TEXT_COLUMN_OPTION,
    USER_COLUMN_OPTION,
    emit_json,
    user_errors,
    warn_if_seeded,
    warn_if_weak_delta,
)
from privlm.cli.ensemble import load_training_data
from privlm.config import option
from privlm.curator import CURATOR_HEADING, split_private_statistics
from privlm.errors import AccountingError
from privlm.models import DEFAULT_MODEL
from privlm.training.config import DpSgdConfig, JftConfig, LoraTrainingConfig

app = typer.Typer(help="Private fine-tuning.", no_args_is_help=True)


@app.command("dpsgd")
@user_errors
def dpsgd(
    data: str = typer.Argument(..., help="A .txt/.jsonl/.csv file, or wikitext2[:split]."),
    out: Path = typer.Option(..., "--out", help="Where to write the adapter and privacy.json."),
    epsilon: float | None = option(DpSgdConfig, "target_epsilon"),
    noise_multiplier: float | None = option(DpSgdConfig, "noise_multiplier"),
    delta: float | None = option(DpSgdConfig, "delta"),
    max_grad_norm: float = option(DpSgdConfig, "max_grad_norm"),
    batch_size: int = option(DpSgdConfig, "batch_size"),
    physical_batch_size: int = option(DpSgdConfig, "physical_batch_size"),
    epochs: int = option(DpSgdConfig, "epochs"),
    learning_rate: float = option(DpSgdConfig, "learning_rate", "--lr"),
    rank: int = option(DpSgdConfig, "rank"),
    block_size: int = option(DpSgdConfig, "block_size"),
    accountant: str = option(DpSgdConfig, "accountant"),
    user_sampling: str = option(DpSgdConfig, "user_sampling"),
    max_blocks_per_user: int | None = option(DpSgdConfig, "max_blocks_per_user"),
    user_reduction: str = option(DpSgdConfig, "user_reduction"),
    text_column: str = TEXT_COLUMN_OPTION,
    user_column: str = USER_COLUMN_OPTION,
    no_header: bool = NO_HEADER_OPTION,
    grad_sample_mode: str = option(DpSgdConfig, "grad_sample_mode"),
    model: str = typer.Option(DEFAULT_MODEL, help="Public model."),
    limit: int | None = typer.Option(None, help="Use only the first LIMIT privacy units."),
    seed: int | None = SEED_OPTION,
    secure_mode: bool = SECURE_MODE_OPTION,
    ledger: Path = typer.Option(
        Path("privlm-ledger.db"), help="Budget ledger charged before the adapter is written."
    ),
    ledger_name: str = typer.Option("dpsgd", help="Ledger name (one per dataset)."),
    budget_epsilon: float | None = typer.Option(
        None, help="Budget ε of a new ledger (default: what this run costs)."
    ),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    gradient_checkpointing: bool = CHECKPOINTING_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Fine-tune a LoRA adapter with DP-SGD (Opacus); print its privacy statement."""
    from privlm.training.dpsgd import examples_per_unit, plan, train_dpsgd

    ds = load_training_data(
        data, limit, text_column=text_column, user_column=user_column, no_header=no_header
    )
    cfg = DpSgdConfig(
        target_epsilon=None if noise_multiplier is not None else epsilon,
        delta=delta,
        noise_multiplier=noise_multiplier,
        max_grad_norm=max_grad_norm,
        batch_size=batch_size,
        physical_batch_size=physical_batch_size,
        epochs=epochs,
        learning_rate=learning_rate,
        rank=rank,
        block_size=block_size,
        accountant=accountant,
        seed=seed,
        secure_mode=secure_mode,
        user_sampling=user_sampling,
        max_blocks_per_user=max_blocks_per_user,
        user_reduction=user_reduction,
        grad_sample_mode=grad_sample_mode,
        device=device,
        dtype=dtype,
        gradient_checkpointing=gradient_checkpointing,
    )
    n_units = len(examples_per_unit(ds)[0])
    q, steps, run_delta, sigma = plan(n_units, cfg)
    # a new ledger's default budget is what this run costs, as the ledger composes it (by
    # the run's accountant: RDP, or PLD for prv), so the run fits exactly once
    run_cost = dpsgd_epsilon(sigma, q, steps, run_delta, accountant).epsilon
    led = _open_ledger(ledger, ledger_name, budget_epsilon, run_cost, run_delta)
    warn_if_seeded(seed)
    warn_if_weak_delta(run_delta, n_units, ds.unit_kind)
    st = train_dpsgd(model, ds, out, cfg, progress=not as_json, ledger=led)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun, rank 0 reports
        return
    if as_json:
        emit_json(with_curator_heading(st.to_dict()))
        return
    typer.echo(
        f"adapter in {out}: ({st.epsilon:.4g}, {st.delta:.3g})-DP per {st.unit_detail} ({st.accountant}); "
        f"σ = {st.noise_multiplier:.4g}, q = {st.sample_rate:.4g}, {st.steps} steps, clip {st.max_grad_norm:g}"
    )
    if st.token_usage:
        typer.echo(f"  {CURATOR_HEADING}: {st.token_usage['summary']}")


def with_curator_heading(statement: dict[str, Any]) -> dict[str, Any]:
    """``--json`` output: the statement as released, its exact statistics apart."""
    released, taken = split_private_statistics(statement)
    return {**released, "not_private_for_the_curator": taken}


def _open_ledger(
    path: Path, name: str, budget_epsilon: float | None, run_cost: float, delta: float
) -> PrivacyLedger:
    """An existing ledger as it is, or a new one with the given budget (default: the run's
    own cost, so the run fits exactly once)."""
    if _ledger_exists(path, name):
        return PrivacyLedger(path, name)
    eps = budget_epsilon if budget_epsilon is not None else run_cost
    return PrivacyLedger(path, name, Budget(eps, delta))


@app.command("jft")
@user_errors
def jft(
    data: str = typer.Argument(..., help="A .txt/.jsonl/.csv file, or wikitext2[:split]."),
    out: Path = typer.Option(..., "--out", help="Where to write the final (phase-2) adapter."),
    detector: str = option(JftConfig, "detector"),
    patterns: Path | None = typer.Option(
        None, help="Rules file (YAML/JSON): your own regexes, deny- and allow-lists."
    ),
    phase1: str = option(JftConfig, "phase1"),
    screened: Path | None = typer.Option(
        None, help="screened mode: the sanitised file (<mask> marks what was removed)."
    ),
    annotated: Path | None = typer.Option(
        None,
        help="Annotated sample: light-noise mode calibrates on the detector's miss rate on it; "
        "direct and screened modes measure and state that rate. Format as privlm detect eval: "
        'JSON lines {"text", '
        '"spans": [{"start", "end", "type"}]} or {"text", "secrets": [...]}.',
    ),
    epsilon: float = option(
        DpSgdConfig, "target_epsilon", help="Target ε of phase 2 (DP-SGD on the original data)."
    ),
    phase1_epsilon: float = option(JftConfig, "phase1_epsilon"),
    delta: float | None = option(DpSgdConfig, "delta"),
    phase1_epochs: int = option(JftConfig, "phase1_epochs"),
    phase1_lr: float = option(JftConfig, "phase1_learning_rate", "--phase1-lr"),
    epochs: int = option(DpSgdConfig, "epochs", help="Phase-2 epochs."),
    learning_rate: float = option(
        DpSgdConfig, "learning_rate", "--lr", help="Phase-2 AdamW learning rate."
    ),
    batch_size: int = option(DpSgdConfig, "batch_size"),
    physical_batch_size: int = option(DpSgdConfig, "physical_batch_size"),
    max_grad_norm: float = option(DpSgdConfig, "max_grad_norm"),
    rank: int = option(DpSgdConfig, "rank"),
    block_size: int = option(DpSgdConfig, "block_size"),
    miss: list[str] = typer.Option(
        [], "--miss", help="Audits only: a string the detector is made to miss (repeatable)."
    ),
    phase1_out: Path | None = typer.Option(
        None,
        help="Keep the phase-1 adapter (trained without noise: not private) here; without "
        "this option it is deleted once phase 2 is done.",
    ),
    text_column: str = TEXT_COLUMN_OPTION,
    user_column: str = USER_COLUMN_OPTION,
    no_header: bool = NO_HEADER_OPTION,
    model: str = typer.Option(DEFAULT_MODEL, help="Public model."),
    limit: int | None = typer.Option(None, help="Use only the first LIMIT privacy units."),
    seed: int | None = SEED_OPTION,
    ledger: Path = typer.Option(Path("privlm-ledger.db"), help="Budget ledger."),
    ledger_name: str = typer.Option("jft", help="Ledger name (one per dataset)."),
    budget_epsilon: float | None = typer.Option(
        None, help="Budget ε of a new ledger (default: what this run charges)."
    ),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    gradient_checkpointing: bool = CHECKPOINTING_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Just Fine-tune Twice: a redacted fine-tune, then DP-SGD; print the SDP statement."""
    from privlm.training.dpsgd import examples_per_unit, plan
    from privlm.training.jft import train_jft

    ds = load_training_data(
        data, limit, text_column=text_column, user_column=user_column, no_header=no_header
    )

    def dp(target: float) -> DpSgdConfig:
        return DpSgdConfig(
            target_epsilon=target,
            delta=delta,
            max_grad_norm=max_grad_norm,
            batch_size=batch_size,
            physical_batch_size=physical_batch_size,
            epochs=epochs,
            learning_rate=learning_rate,
            rank=rank,
            block_size=block_size,
            seed=seed,
            device=device,
            dtype=dtype,
            gradient_checkpointing=gradient_checkpointing,
        )

    cfg = JftConfig(
        detector=detector,
        phase1=phase1,
        phase1_epochs=phase1_epochs,
        phase1_learning_rate=phase1_lr,
        phase1_epsilon=phase1_epsilon,
        screened_file=screened,
        annotated_file=annotated,
        patterns_file=patterns,
        deliberately_missed=list(miss),
        phase1_training=LoraTrainingConfig(
            epochs=phase1_epochs,
            learning_rate=phase1_lr,
            pack=False,
            rank=rank,
            block_size=block_size,
            batch_size=physical_batch_size,
            seed=0 if seed is None else seed,  # phase 1's shuffle: no noise, no guarantee
            device=device,
            dtype=dtype,
            gradient_checkpointing=gradient_checkpointing,
        ),
        phase2=dp(epsilon),
    )
    n = len(examples_per_unit(ds)[0])
    q, steps, run_delta, sigma = plan(n, cfg.phase2)
    warn_if_weak_delta(run_delta, n, ds.unit_kind)
    run_cost = DpSgdPlan(sigma, q, steps).rdp_curve().to_dp(run_delta).epsilon
    if phase1 == "light-noise":
        run_cost += phase1_epsilon  # a new ledger's default: room for both charges
    led = _open_ledger(ledger, ledger_name, budget_epsilon, run_cost, run_delta)
    warn_if_seeded(seed)
    st = train_jft(model, ds, out, cfg, phase1_dir=phase1_out, ledger=led, progress=not as_json)
    if as_json:
        emit_json(with_curator_heading(st.to_dict()))
        return
    kept = f"phase 1 in {phase1_out}" if phase1_out else "phase 1 not kept (--phase1-out keeps it)"
    typer.echo(f"adapter in {out} ({kept})")
    typer.echo(st.guarantee)
    typer.echo(f"assumption: {st.assumption}")
    typer.echo(f"{CURATOR_HEADING} (exact statistics of the data, no ε covers them):")
    if "redacted_token_fraction" in st.phase1:
        typer.echo(
            f"  tokens redacted in phase 1: {100 * st.phase1['redacted_token_fraction']:.1f}%"
        )
    usage1 = (st.phase1.get("training") or st.phase1.get("statement") or {}).get("token_usage")
    if usage1:
        typer.echo(f"  phase 1 {usage1['summary']}")
    if st.phase2.get("token_usage"):
        typer.echo(f"  phase 2 {st.phase2['token_usage']['summary']}")


def _ledger_exists(path: Path, name: str) -> bool:
    if not path.is_file():
        return False
    try:
        PrivacyLedger(path, name)
    except AccountingError:
        return False
    return True
