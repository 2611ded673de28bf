"""``privlm data``: bundled corpora and user files."""

from __future__ import annotations

from pathlib import Path

import typer

from privlm.cli.common import JSON_OPTION, emit_json, user_errors
from privlm.data import load_file
from privlm.data.corpora import BUNDLED, available
from privlm.settings import data_dir

app = typer.Typer(help="Datasets.", no_args_is_help=True)


@app.command("list")
@user_errors
def list_corpora(as_json: bool = JSON_OPTION) -> None:
    """The bundled corpora and whether they are present under PRIVLM_DATA."""
    present = available()
    rows = [
        {"name": c.name, "present": present[c.name], "description": c.description}
        for c in BUNDLED.values()
    ]
    if as_json:
        emit_json(rows)
        return
    try:
        typer.echo(f"data directory: {data_dir()}")
    except Exception as exc:  # the listing still helps without a data directory
        typer.echo(f"data directory: none ({exc})")
    for r in rows:
        typer.echo(
            f"  {r['name']:<10} {'present' if r['present'] else 'MISSING':<8} {r['description']}"
        )


@app.command("inspect")
@user_errors
def inspect(
    path: Path = typer.Argument(..., help="A .txt, .jsonl or .csv file."),
    text_column: str = typer.Option("text", help="Column holding the text (.jsonl/.csv)."),
    unit_column: str = typer.Option("user_id", help="Column naming the privacy unit, if any."),
    label_column: str = typer.Option("label", help="Column holding a label, if any."),
    records: str = typer.Option(
        "line", help=".txt only: 'line' or 'block' (blank-line separated)."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Validate a data file and summarise it: records, privacy units, labels, skips."""
    ds = load_file(
        path,
        text_column=text_column,
        unit_column=unit_column,
        label_column=label_column,
        records=records,
    )
    summary = ds.summary()
    if as_json:
        emit_json(summary)
        return
    typer.echo(f"{summary['source']}")
    typer.echo(f"  records:       {summary['records']}")
    typer.echo(f"  privacy unit:  {summary['privacy_unit']} ({summary['units']} units)")
    if summary["labels"]:
        typer.echo(f"  labels:        {summary['labels']}")
    typer.echo(f"  characters:    {summary['chars_total']} (max {summary['chars_max']} per record)")
    typer.echo(f"  skipped rows:  {summary['skipped']} {summary['skipped_by_reason'] or ''}")
