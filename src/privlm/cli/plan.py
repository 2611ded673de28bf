"""``privlm plan <mechanism>``: size a private-prediction deployment before serving it. One
subcommand per registered mechanism that has a planner (:mod:`privlm.predict.mechanisms`),
its options that mechanism's settings."""

from __future__ import annotations

from typing import Any

import typer

from privlm.cli.common import JSON_OPTION, emit_json, user_errors
from privlm.config import cli_settings
from privlm.predict.mechanisms import Mechanism, mechanisms

ENSEMBLE_SIZE_OPTION = typer.Option(80, min=1, help="N, the ensemble's members (the paper's 80).")


def _command(m: Mechanism) -> Any:
    @user_errors
    def plan(
        ensemble_size: int = ENSEMBLE_SIZE_OPTION,
        as_json: bool = JSON_OPTION,
        settings: dict[str, Any] | None = None,
    ) -> None:
        assert m.plan is not None
        out = m.plan(m.make_config(settings), ensemble_size)
        if as_json:
            emit_json({k: v for k, v in out.items() if k != "lines"})
            return
        for line in out["lines"]:
            typer.echo(line)

    plan.__doc__ = f"{m.summary}: its budget, radius and relation."
    return cli_settings(m.config, into="settings")(plan)


def plan_app() -> typer.Typer:
    """The plan commands, one per registered mechanism with a planner."""
    app = typer.Typer(help="Plan private-prediction budgets.", no_args_is_help=True)
    for m in mechanisms():
        if m.plan is not None:
            app.command(m.name)(_command(m))
    return app
