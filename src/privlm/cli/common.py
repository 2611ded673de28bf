"""Shared CLI plumbing: JSON or human output, and user errors without tracebacks."""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

if TYPE_CHECKING:
    from privlm.data import Record

from privlm.config import (
    CHECKPOINTING_HELP,
    DEVICE_HELP,
    DTYPE_HELP,
    SECURE_MODE_HELP,
    SEED_HELP,
)
from privlm.errors import PrivlmError

F = TypeVar("F", bound=Callable[..., Any])

JSON_OPTION = typer.Option(False, "--json", help="Print machine-readable JSON.")
# for commands whose config class does not declare these (the settings' own help texts)
DEVICE_OPTION = typer.Option("auto", "--device", help=DEVICE_HELP + ".")
DTYPE_OPTION = typer.Option("auto", "--dtype", help=DTYPE_HELP + ".")
CHECKPOINTING_OPTION = typer.Option(
    False, "--gradient-checkpointing", help=CHECKPOINTING_HELP + "."
)
SEED_OPTION = typer.Option(None, "--seed", help=SEED_HELP + ".")
SECURE_MODE_OPTION = typer.Option(False, "--secure-mode", help=SECURE_MODE_HELP + ".")


def warn_if_seeded(seed: int | None) -> None:
    """Print, on stderr, what a seed does to the guarantee."""
    if seed is not None:
        from privlm.randomness import SEEDED_WARNING

        typer.echo(f"warning: {SEEDED_WARNING}", err=True)


def noise_from_flags(settings: dict[str, Any]) -> dict[str, Any]:
    """DP-SGD's σ choice from the flags given: ``--noise-multiplier X`` alone picks the fixed
    σ (Opacus's ``make_private``), as if ``--noise noise-multiplier`` were given too; the
    config itself takes the choice only explicitly (``DpSgdPrivacy.noise``)."""
    if settings.get("noise_multiplier") is not None and settings.get("noise") == "target-epsilon":
        settings["noise"] = "noise-multiplier"
    return settings


def warn_if_weak_delta(delta: float, units: int, unit: str = "record") -> None:
    """Print, on stderr, when δ is weak for the number of privacy units."""
    from privlm.accounting.advice import weak_delta_warning

    message = weak_delta_warning(delta, units, unit)
    if message is not None:
        typer.echo(f"warning: {message}", err=True)


def warn_if_few_steps(steps: int, sample_rate: float, units: int, batch_size: int) -> None:
    """Print, on stderr, when a DP-SGD run has too few steps to train."""
    from privlm.accounting.advice import few_steps_warning

    message = few_steps_warning(steps, sample_rate, units, batch_size)
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


LEDGER_NAME_HELP = (
    "Ledger name within --ledger (default: one per body of records, named from its texts, "
    "shared by every command run on them)."
)


def records_ledger_name(path: Path, texts: Iterable[str]) -> str:
    """The default ledger of a body of records in ledger file ``path``: ``data-`` and an
    HMAC, under the file's own secret key, of its distinct texts in canonical form
    (privlm.data.canonical: another encoding, case or order of the same records names the
    same ledger). So ``train dpsgd``, ``synth`` and ``prompt dpsgd`` on one file draw on one
    budget, and the name tells nothing about the records to anyone without the file. A
    subset or a near-copy gets a ledger of its own: the service's record index, not this
    name, recognises those (docs/sharp_edges.md, "What the record index recognises")."""
    import hashlib
    import hmac

    from privlm.accounting.ledger import naming_key
    from privlm.data.canonical import canonical_text

    body = "\0".join(sorted({canonical_text(t) for t in texts}))
    mac = hmac.new(naming_key(path), body.encode("utf-8"), hashlib.sha256).hexdigest()
    return f"data-{mac[:16]}"


@contextmanager
def run_ledger(
    path: Path,
    name: str | None,
    budget_epsilon: float | None,
    run_cost: float,
    delta: float,
    records: Iterable[Record] = (),
) -> Iterator[Any]:
    """A run's ledger: ledger ``name`` in ``path`` (default ``./privlm-ledger.db``; default
    name: :func:`records_ledger_name` of the run's private ``records``) as it is, or a
    new one whose budget is ``budget_epsilon`` (default: what this run costs, so it fits
    exactly once). A new ledger the run leaves without a charge (it was refused) is
    removed again, and the file with it if the run made it, so a retry starts afresh; a
    refusal by an existing ledger says how to give several runs one budget."""
    from privlm.accounting import Budget, PrivacyLedger
    from privlm.errors import AccountingError, BudgetExceededError

    new_file = not path.exists()
    if name is None:
        name = records_ledger_name(path, (r.text for r in records))
    if not new_file:
        try:
            led = PrivacyLedger(path, name)
        except AccountingError:
            pass  # no ledger of that name in the file yet
        else:
            _check_budget_flag(led, path, budget_epsilon)
            try:
                yield led
            except BudgetExceededError as exc:
                raise BudgetExceededError(f"{exc}\n{_one_budget_hint(led, path)}") from None
            _say_ledger(led, path)
            return
    eps = budget_epsilon if budget_epsilon is not None else run_cost
    led = PrivacyLedger(path, name, Budget(eps, delta))
    try:
        yield led
    finally:
        if led.discard_if_unused() and new_file and led.database_is_empty():
            led.close()
            for leftover in (path, *(Path(f"{path}{x}") for x in ("-wal", "-shm"))):
                leftover.unlink(missing_ok=True)
        elif led.count():
            _say_ledger(led, path)


def _say_ledger(led: Any, path: Path) -> None:
    typer.echo(f"charged to ledger {led.name!r} in {path} (privlm ledger show {path})", err=True)


def _check_budget_flag(led: Any, path: Path, budget_epsilon: float | None) -> None:
    """``--budget-epsilon`` sets a new ledger's budget; on an existing one it is refused
    unless it says the same, never silently ignored."""
    from privlm.errors import PrivlmError

    if budget_epsilon is not None and abs(budget_epsilon - led.budget.epsilon) > 1e-9:
        raise PrivlmError(
            f"ledger {led.name!r} in {path} already has budget ε={led.budget.epsilon:.6g}; "
            "--budget-epsilon sets the budget of a new ledger only (a budget never changes). "
            "Use another --ledger file or --ledger-name for a new budget"
        )


def _one_budget_hint(led: Any, path: Path) -> str:
    return (
        f"ledger {led.name!r} in {path} was created by an earlier run with budget "
        f"ε={led.budget.epsilon:.6g}; runs on the same data share one budget and their ε add "
        "up. To give several runs one budget, create the ledger with --budget-epsilon "
        "covering them all on the first run (`privlm ledger show "
        f"{path} --name {led.name}` shows what is spent)"
    )
