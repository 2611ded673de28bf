"""``privlm train``: private fine-tuning."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import typer

from privlm.cli.common import (
    JSON_OPTION,
    LEDGER_NAME_HELP,
    NO_HEADER_OPTION,
    TEXT_COLUMN_OPTION,
    USER_COLUMN_OPTION,
    emit_json,
    noise_from_flags,
    run_ledger,
    user_errors,
    warn_if_few_steps,
    warn_if_seeded,
    warn_if_weak_delta,
)
from privlm.cli.ensemble import load_training_data
from privlm.config import cli_settings
from privlm.curator import CURATOR_HEADING, Schema, split_statement
from privlm.models import DEFAULT_MODEL
from privlm.training.config import DpSgdConfig, JftConfig

app = typer.Typer(help="Private fine-tuning.", no_args_is_help=True)

# the flags some settings have always had
SETTING_FLAGS: dict[str, tuple[str, ...]] = {
    "target_epsilon": ("--epsilon",),
    "learning_rate": ("--lr",),
}
PHASE2_HELP = {
    "target_epsilon": "Target ε of phase 2 (DP-SGD on the original data)",
    "epochs": "Phase-2 epochs",
    "learning_rate": "Phase-2 AdamW learning rate",
}


@app.command("dpsgd")
@user_errors
@cli_settings(DpSgdConfig, into="settings", decls=SETTING_FLAGS)
def dpsgd(
    data: str = typer.Argument(..., help="A .txt/.jsonl/.csv file, or wikitext2[:split]."),
    out: Path = typer.Option(..., "--out", help="Where to write the adapter and privacy.json."),
    text_column: str = TEXT_COLUMN_OPTION,
    user_column: str = USER_COLUMN_OPTION,
    no_header: bool = NO_HEADER_OPTION,
    model: str = typer.Option(DEFAULT_MODEL, help="Public model."),
    limit: int | None = typer.Option(None, help="Use only the first LIMIT privacy units."),
    ledger: Path = typer.Option(
        Path("privlm-ledger.db"), help="Budget ledger charged before the adapter is written."
    ),
    ledger_name: str | None = typer.Option(None, help=LEDGER_NAME_HELP),
    budget_epsilon: float | None = typer.Option(
        None, help="Budget ε of a new ledger (default: what this run costs)."
    ),
    as_json: bool = JSON_OPTION,
    *,
    settings: dict[str, Any],
) -> None:
    """Fine-tune a LoRA adapter with DP-SGD (Opacus); print its privacy statement. Every
    DpSgdConfig setting is an option here (privlm.config.cli_settings)."""
    ds = load_training_data(
        data, limit, text_column=text_column, user_column=user_column, no_header=no_header
    )  # the file and its columns are checked before the heavy imports
    from privlm.training.dpsgd import RUN_RELEASES, plan_run, train_dpsgd

    cfg = DpSgdConfig(**noise_from_flags(settings))
    run = plan_run(ds, cfg)
    # a new ledger's default budget is what this run costs, as the ledger composes it (by
    # the run's accountant: RDP, or PLD for prv), so the run fits exactly once
    cost = run.epsilon(cfg.accountant)
    with run_ledger(ledger, ledger_name, budget_epsilon, cost, run.delta, ds.records) as led:
        warn_if_seeded(cfg.seed)
        warn_if_weak_delta(run.delta, run.units, ds.unit_kind)
        warn_if_few_steps(run.steps, run.sample_rate, run.units, cfg.batch_size)
        st = train_dpsgd(model, ds, out, cfg, progress=not as_json, ledger=led)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun, rank 0 reports
        return
    if as_json:
        emit_json(with_curator_heading(st.to_dict(), RUN_RELEASES))
        return
    from privlm.accounting.statements import guarantee_text

    typer.echo(
        f"adapter in {out}: {guarantee_text(st.epsilon, st.delta, st.unit_detail)} ({st.accountant}); "
        f"σ = {st.noise_multiplier:.4g}, q = {st.sample_rate:.4g}, {st.steps} steps, clip {st.max_grad_norm:g}"
    )
    if st.token_usage:
        typer.echo(f"  {CURATOR_HEADING}: {st.token_usage['summary']}")


def with_curator_heading(statement: dict[str, Any], schema: Schema) -> dict[str, Any]:
    """``--json`` output: the statement as its artefact releases it (``schema``, the
    mechanism's), every other figure apart, for the curator."""
    split = split_statement(statement, schema)
    return {**split.released, "not_private_for_the_curator": split.curator}


@app.command("jft")
@user_errors
@cli_settings(JftConfig, into="jft_settings", decls={"phase1_learning_rate": ("--phase1-lr",)})
@cli_settings(DpSgdConfig, into="phase2", decls=SETTING_FLAGS, helps=PHASE2_HELP)
def jft(
    data: str = typer.Argument(..., help="A .txt/.jsonl/.csv file, or wikitext2[:split]."),
    out: Path = typer.Option(..., "--out", help="Where to write the final (phase-2) adapter."),
    patterns: Path | None = typer.Option(
        None, help="Rules file (YAML/JSON): your own regexes, deny- and allow-lists."
    ),
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
    ledger: Path = typer.Option(Path("privlm-ledger.db"), help="Budget ledger."),
    ledger_name: str | None = typer.Option(None, help=LEDGER_NAME_HELP),
    budget_epsilon: float | None = typer.Option(
        None, help="Budget ε of a new ledger (default: what this run charges)."
    ),
    as_json: bool = JSON_OPTION,
    *,
    jft_settings: dict[str, Any],
    phase2: dict[str, Any],
) -> None:
    """Just Fine-tune Twice: a redacted fine-tune, then DP-SGD; print the SDP statement.
    Every JftConfig setting and every DP-SGD setting of phase 2 is an option here; phase 1's
    are built from them (JftConfig.phase1_lora)."""
    ds = load_training_data(
        data, limit, text_column=text_column, user_column=user_column, no_header=no_header
    )  # the file and its columns are checked before the heavy imports
    from privlm.accounting import DpSgdPlan
    from privlm.training.dpsgd import plan_run
    from privlm.training.jft import RELEASES as JFT_RELEASES
    from privlm.training.jft import train_jft

    noise_from_flags(phase2)
    cfg = JftConfig(
        **jft_settings, screened_file=screened, annotated_file=annotated, patterns_file=patterns,
        deliberately_missed=list(miss), phase2=DpSgdConfig(**phase2),
    )  # fmt: skip
    run = plan_run(ds, cfg.phase2)
    warn_if_weak_delta(run.delta, run.units, ds.unit_kind)
    warn_if_few_steps(run.steps, run.sample_rate, run.units, cfg.phase2.batch_size)
    run_cost = (
        DpSgdPlan(run.noise_multiplier, run.sample_rate, run.steps)
        .rdp_curve()
        .to_dp(run.delta)
        .epsilon
    )
    if cfg.phase1 == "light-noise":
        run_cost += cfg.phase1_epsilon  # a new ledger's default: room for both charges
    with run_ledger(ledger, ledger_name, budget_epsilon, run_cost, run.delta, ds.records) as led:
        warn_if_seeded(cfg.phase2.seed)
        st = train_jft(model, ds, out, cfg, phase1_dir=phase1_out, ledger=led, progress=not as_json)
    if as_json:
        emit_json(with_curator_heading(st.to_dict(), JFT_RELEASES))
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
