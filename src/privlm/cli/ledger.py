"""``privlm ledger``: look at a privacy ledger."""

from __future__ import annotations

from pathlib import Path

import typer

from privlm.cli.common import JSON_OPTION, emit_json, user_errors
from privlm.errors import PrivlmError

app = typer.Typer(help="Privacy ledgers.", no_args_is_help=True)


@app.command("show")
@user_errors
def show(
    path: Path = typer.Argument(..., help="The ledger's SQLite file."),
    name: str | None = typer.Option(
        None,
        help="Ledger name within the file (default: its only ledger; with several, "
        "each is listed).",
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Budget, spent and remaining ε, and the charges of a ledger."""
    if not path.is_file():
        raise PrivlmError(f"{path}: no such ledger file")
    from privlm.accounting.ledger import PrivacyLedger, ledger_names  # SQLAlchemy: here

    names = ledger_names(path)
    if name is None and len(names) != 1:
        _list(path, names, as_json)
        return
    name = names[0] if name is None else name
    if name not in names:
        raise PrivlmError(f"{path} holds no ledger {name!r}; it holds {', '.join(names) or 'none'}")
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


def _list(path: Path, names: list[str], as_json: bool) -> None:
    """Every ledger in ``path``: its budget and what it has spent."""
    from privlm.accounting.ledger import PrivacyLedger

    rows = []
    for n in names:
        data = PrivacyLedger(path, n).to_json()
        rows.append({"name": n, "budget": data["budget"], "spent": data["spent"],
                     "charges": len(data["charges"])})  # fmt: skip
    if as_json:
        emit_json({"ledgers": rows})
        return
    typer.echo(f"{path}: {len(rows)} ledgers (show one with --name)")
    for r in rows:
        typer.echo(
            f"  {r['name']}: spent ε={r['spent']['epsilon']:.6g} of {r['budget']['epsilon']:g} "
            f"at δ={r['budget']['delta']:g}, {r['charges']} charges"
        )
