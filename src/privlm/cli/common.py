"""Shared CLI plumbing: JSON or human output, and user errors without tracebacks."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from privlm.errors import PrivlmError

F = TypeVar("F", bound=Callable[..., Any])

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON.")
DEVICE_OPTION = typer.Option(
    "auto",
    "--device",
    help="auto (the PRIVLM_DEVICE variable, else CUDA when a GPU is there, else cpu), cpu, "
    "cuda or cuda:N.",
)
DTYPE_OPTION = typer.Option(
    "auto",
    "--dtype",
    help="The model's weights: auto (bfloat16 on a GPU that has it, else float32), float32, "
    "bfloat16 or float16. Privacy math always runs in float64.",
)
CHECKPOINTING_OPTION = typer.Option(
    False,
    "--gradient-checkpointing",
    help="Recompute each layer's activations in the backward pass: less memory for big "
    "models, about a third more compute. DP-SGD stays exact (reentrant checkpointing).",
)
SEED_OPTION = typer.Option(
    None,
    "--seed",
    help="Reproducible experiments only: fixes the noise and sampling, so the privacy "
    "guarantee does not hold against anyone who knows the seed. Default: fresh OS entropy.",
)

SECURE_MODE_OPTION = typer.Option(
    False,
    "--secure-mode",
    help="Draw every noise coordinate and Poisson coin from the OS CSPRNG (os.urandom) "
    "instead of a CSPRNG-seeded torch generator. Same accounting; cannot be seeded.",
)


def warn_if_seeded(seed: int | None) -> None:
    """Print, on stderr, what a seed does to the guarantee."""
    if seed is not None:
        from privlm.randomness import SEEDED_WARNING

        typer.echo(f"warning: {SEEDED_WARNING}", err=True)


def warn_if_weak_delta(delta: float, units: int, unit: str = "record") -> None:
    """Print, on stderr, when δ is weak for the number of privacy units."""
    from privlm.accounting.advice import weak_delta_warning

    message = weak_delta_warning(delta, units, unit)
    if message is not None:
        typer.echo(f"warning: {message}", err=True)


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "inf" if value > 0 else ("-inf" if value < 0 else "nan")
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def emit_json(payload: Any) -> None:
    typer.echo(json.dumps(_clean(payload), indent=2))


def user_errors(fn: F) -> F:
    """Turn a :class:`PrivlmError` into ``error: <message>`` on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except PrivlmError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]


TEXT_COLUMN_OPTION = typer.Option(
    "text", "--text-column", help="Column (field) holding the text; with --no-header, its position."
)
USER_COLUMN_OPTION = typer.Option(
    "user_id", "--user-column", help="Column naming each record's user (the privacy unit), if any."
)
LABEL_COLUMN_OPTION = typer.Option(
    "label", "--label-column", help="Column holding a label, if any."
)
NO_HEADER_OPTION = typer.Option(
    False, "--no-header", help="A .csv whose first row is data: name columns by position (1, 2, …)."
)
