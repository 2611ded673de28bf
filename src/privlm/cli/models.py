"""``privlm models``: list and pre-convert public models."""

from __future__ import annotations

import typer

from privlm.cli.common import JSON_OPTION, emit_json, user_errors
from privlm.models import DEFAULT_MODEL, KNOWN_MODELS

app = typer.Typer(help="Public models.", no_args_is_help=True)


@app.command("list")
@user_errors
def list_models(as_json: bool = JSON_OPTION) -> None:
    """Models privlm knows by name (any HF id or local directory works too)."""
    from privlm.models.gguf_package import converted_dir

    rows = []
    for spec in KNOWN_MODELS.values():
        prepared = spec.kind == "tiny" or (converted_dir(spec) / "config.json").is_file()
        rows.append(
            {
                "name": spec.name,
                "default": spec.name == DEFAULT_MODEL,
                "prepared": prepared,
                "description": spec.description,
            }
        )
    if as_json:
        emit_json(rows)
        return
    for r in rows:
        mark = "*" if r["default"] else " "
        state = "ready" if r["prepared"] else "not prepared"
        typer.echo(f"{mark} {r['name']:<14} {state:<13} {r['description']}")
    typer.echo("Also: any Hugging Face model id, or a local model directory.")


@app.command("prepare")
@user_errors
def prepare(
    name: str = typer.Argument(DEFAULT_MODEL, help="Model name, HF id or local directory."),
    force: bool = typer.Option(False, "--force", help="Convert again even if cached."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Pre-convert a model (GGUF → safetensors) so later loads take seconds."""
    from privlm.models import prepare_model

    where = prepare_model(name, force=force)
    if as_json:
        emit_json({"name": name, "cached_at": where})
    else:
        typer.echo(f"{name}: ready ({where})")
