"""``privlm ensemble``: train the LoRA ensembles private prediction serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from privlm.cli.common import (
    CHECKPOINTING_OPTION,
    DEVICE_OPTION,
    DTYPE_OPTION,
    JSON_OPTION,
    NO_HEADER_OPTION,
    TEXT_COLUMN_OPTION,
    USER_COLUMN_OPTION,
    emit_json,
    user_errors,
)
from privlm.config import cli_settings
from privlm.curator import CURATOR_HEADING, curator_report_path
from privlm.data import Dataset, corpora, load_file
from privlm.errors import PrivlmError
from privlm.models import DEFAULT_MODEL
from privlm.training.config import EnsembleConfig, LoraTrainingConfig

app = typer.Typer(help="LoRA ensembles for PMixED and SubMix.", no_args_is_help=True)


def load_training_data(
    data: str,
    limit: int | None,
    records: str = "line",
    *,
    text_column: str = "text",
    user_column: str = "user_id",
    label_column: str = "label",
    no_header: bool = False,
) -> Dataset:
    """A user file (``.gz`` too, headerless CSVs by position), or ``wikitext2[:split]``."""
    name, _, split = data.partition(":")
    if name == "wikitext2" and not Path(data).exists():
        ds = corpora.wikitext2(split or "train")
    else:
        ds = load_file(
            data, records=records, text_column=text_column, unit_column=user_column,
            label_column=label_column, no_header=no_header,
        )  # fmt: skip
    if limit is not None:
        if limit < 1:
            raise PrivlmError("--limit must be at least 1")
        keep = set(ds.units()[:limit])
        ds = Dataset([r for r in ds.records if r.unit in keep], ds.source, ds.unit_kind, ds.skipped)
    return ds


@app.command("train")
@user_errors
@cli_settings(EnsembleConfig, into="shape")
@cli_settings(LoraTrainingConfig, into="training", decls={"learning_rate": ("--lr",)})
def train(
    data: str = typer.Argument(..., help="A .txt/.jsonl/.csv file, or wikitext2[:split]."),
    out: Path = typer.Option(..., "--out", help="Output directory (resumes if interrupted)."),
    model: str = typer.Option(DEFAULT_MODEL, help="Public model: name, HF id or directory."),
    limit: int | None = typer.Option(None, help="Use only the first LIMIT privacy units."),
    records: str = typer.Option("line", help=".txt only: 'line' or 'block' records."),
    text_column: str = TEXT_COLUMN_OPTION,
    user_column: str = USER_COLUMN_OPTION,
    no_header: bool = NO_HEADER_OPTION,
    targets: str | None = typer.Option(
        None, help="Comma-separated module names; default: discovered."
    ),
    seed: int = typer.Option(
        0, help="Training seed (initialisation, shuffling): no privacy randomness."
    ),
    partition_key: str | None = typer.Option(
        None,
        help="Hex key of the keyed-hash partition (default: fresh; recorded in the manifest).",
    ),
    ray: str | None = typer.Option(
        None, "--ray", help="Ray cluster ADDRESS (or 'local'): one task per adapter."
    ),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    gradient_checkpointing: bool = CHECKPOINTING_OPTION,
    as_json: bool = JSON_OPTION,
    *,
    shape: dict[str, Any],
    training: dict[str, Any],
) -> None:
    """Partition the data by privacy unit and fine-tune one LoRA adapter per (sub)part, or
    (--members in-context) make each part's records its member's prompt, with no training.
    Every EnsembleConfig and LoraTrainingConfig setting is an option here."""
    from privlm.training.ensemble import ensemble_statistics, train_ensemble

    ds = load_training_data(data, limit, records, text_column=text_column,
                            user_column=user_column, no_header=no_header)  # fmt: skip
    cfg = LoraTrainingConfig(
        **training,
        targets=targets.split(",") if targets else None,
        seed=seed,
        device=device,
        dtype=dtype,
        gradient_checkpointing=gradient_checkpointing,
    )
    manifest = train_ensemble(
        model, ds, out, EnsembleConfig(**shape, training=cfg), progress=not as_json,
        ray_address=ray, partition_key=partition_key,
    )  # fmt: skip
    statistics = ensemble_statistics(out)
    if as_json:
        emit_json({**manifest.to_dict(), "not_private_for_the_curator": statistics})
        return
    adapters = statistics.get("adapters", {})
    empty = [n for n, a in adapters.items() if a.get("empty_part")]
    if empty:
        typer.echo(
            f"note: {len(empty)} part(s) received no unit ({', '.join(empty)}); their members "
            "are the public model. Use fewer parts or more data for a fuller ensemble.",
            err=True,
        )
    kind = "in-context members" if manifest.member_kind == "in-context" else "adapters"
    typer.echo(
        f"{manifest.protocol} ensemble of {manifest.members} {kind} on {manifest.model} in {out} "
        f"({manifest.units} {manifest.privacy_unit} units)"
    )
    secs = sum(a.get("seconds", 0.0) for a in adapters.values())
    typer.echo(f"  {CURATOR_HEADING} (in {curator_report_path(out).name})")
    if manifest.member_kind == "in-context":
        cut = sum(bool(a.get("cut")) for a in adapters.values())
        typer.echo(
            f"    {cut} of {len(adapters)} member prompts cut at {manifest.prompt_tokens} tokens"
        )
    else:
        typer.echo(f"    {secs:.0f}s of training; {ensemble_token_usage(adapters)}")


def ensemble_token_usage(adapters: dict[str, Any]) -> str:
    """The adapters' token usage, summed: what packing and --max-blocks left out."""
    usages = [a["token_usage"] for a in adapters.values() if a.get("token_usage")]
    total = sum(u["tokens"] for u in usages)
    used = sum(u["used"] for u in usages)
    line = f"the adapters train on {used:,} of {total:,} tokens ({used / max(total, 1):.1%})"
    worst = max(usages, key=lambda u: u["dropped"], default=None)
    if worst is not None and worst["dropped"]:
        line += f"; the most from one part: {worst['summary']}"
    return line
