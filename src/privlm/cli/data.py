"""``privlm data``: bundled corpora and user files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from privlm.cli.common import JSON_OPTION, NO_HEADER_OPTION, emit_json, user_errors
from privlm.data import load_file
from privlm.data.corpora import BUNDLED, available
from privlm.settings import data_dir, data_target

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
    if not all(present.values()):
        typer.echo("missing corpora: `privlm data fetch NAME` downloads one (docs/data.md)")


@app.command("fetch")
@user_errors
def fetch(
    names: list[str] | None = typer.Argument(
        None, help="Corpora to fetch (default: all); see `privlm data list`."
    ),
    to: Path | None = typer.Option(
        None, help="Folder to store them in (default: PRIVLM_DATA, else $PRIVLM_CACHE/data)."
    ),
) -> None:
    """Download the benchmark corpora from pinned public sources, checked by SHA-256."""
    from privlm.data.fetch import LICENCES, SOURCES
    from privlm.data.fetch import fetch as fetch_corpora

    chosen = names or list(SOURCES)
    root = to or data_target()
    written = fetch_corpora(chosen, root, report=lambda line: typer.echo(f"  {line}"))
    typer.echo(f"{len(written)} file(s) written under {root}")
    for name in chosen:
        typer.echo(f"  {name}: {LICENCES[name]}")
    if to is not None:
        typer.echo(f"set PRIVLM_DATA={root} for privlm to use them")


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
    no_header: bool = NO_HEADER_OPTION,
    block_size: int | None = typer.Option(
        None, help="Report the tokens DP-SGD at this block size trains on and drops, per unit."
    ),
    max_blocks_per_user: int | None = typer.Option(None, help="With --block-size: the cap."),
    model: str = typer.Option("smollm2-135m", help="With --block-size: whose tokenizer."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Validate a data file and summarise it: records, privacy units, labels, skips."""
    ds = load_file(
        path,
        text_column=text_column,
        unit_column=unit_column,
        label_column=label_column,
        records=records,
        no_header=no_header,
    )
    summary = ds.summary()
    if block_size is not None:
        summary["token_usage"] = _token_usage(ds, model, block_size, max_blocks_per_user)
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
    if "token_usage" in summary:
        typer.echo(f"  DP-SGD:        {summary['token_usage']['summary']}")


def _token_usage(ds: Any, model: str, block_size: int, cap: int | None) -> dict[str, Any]:
    """What DP-SGD at ``block_size`` trains on: users' blocks (all, or ``cap`` of them) for
    user-level data, each record cut at the block size otherwise."""
    from privlm.models.loading import load_tokenizer
    from privlm.training.dpsgd import records_per_unit
    from privlm.training.user_level import (
        unit_token_counts,
        usage_when_blocking,
        usage_when_truncating,
    )

    counts = unit_token_counts(load_tokenizer(model), records_per_unit(ds))
    usage = (
        usage_when_blocking(counts, block_size, cap)
        if ds.unit_kind != "record"
        else usage_when_truncating(counts, block_size, f"the block size of {block_size}")
    )
    return usage.to_dict()
