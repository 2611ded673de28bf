"""``privlm ledger``: look at a privacy ledger."""

from __future__ import annotations

from pathlib import Path

import typer

from privlm.accounting import PrivacyLedger
from privlm.cli.common import JSON_OPTION, emit_json, user_errors
from privlm.errors import PrivlmError

app = typer.Typer(help="Privacy ledgers.", no_args_is_help=True)


@app.command("show")
@user_errors
def show(
    path: Path = typer.Argument(..., help="The ledger's SQLite file."),
    name: str = typer.Option("default", help="Ledger name within the file."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Budget, spent and remaining ε, and the charges of a ledger."""
    if not path.is_file():
        raise PrivlmError(f"{path}: no such ledger file")
    data = PrivacyLedger(path, name).to_json()
    if as_json:
        emit_json(data)
        return
    b, s = data["budget"], data["spent"]
    typer.echo(f"ledger {name!r}: budget ε={b['epsilon']:g} at δ={b['delta']:g}")
    typer.echo(f"  spent ε={s['epsilon']:.6g}, remaining ε={data['remaining_epsilon']:.6g}")
    if data["overdrawn"]:
        typer.echo(f"  overdrawn, every further charge is refused: {data['overdrawn']}")
    typer.echo(f"  {len(data['charges'])} charges")
    for c in data["charges"][-10:]:
        typer.echo(f"    #{c['seq']} {c['created_at']} {c['mechanism']} unit={c['unit']}")
