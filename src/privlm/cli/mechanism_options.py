"""The CLI's options for the private mechanisms, generated from their registry
(:mod:`privlm.predict.mechanisms`): one option per setting any of them declares. A command
decorated when the command line is built sees every mechanism registered by then, so a new
mechanism's settings are options with no edit here."""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

import typer

from privlm.config import Setting, bound_violation
from privlm.predict.mechanisms import Mechanism, private_mechanisms

MECHANISM_SETTING = "privlm_mechanism_setting"  # marks a generated option (found by the tests)


def owners() -> dict[str, list[tuple[Mechanism, Setting]]]:
    """Every setting name of a private mechanism, with the mechanisms that declare it."""
    out: dict[str, list[tuple[Mechanism, Setting]]] = {}
    for m in private_mechanisms():
        for name, s in m.settings().items():
            out.setdefault(name, []).append((m, s))
    return out


def _help(name: str, declared: list[tuple[Mechanism, Setting]]) -> str:
    """Each mechanism's help and default for this setting: the one a mechanism uses is its
    own default unless the option is given."""
    parts = [f"{m.name}: {s.describe().rstrip('.')} (default {s.default!r})" for m, s in declared]
    return "; ".join(parts) + ". Given for a mechanism that does not take it: refused."


def _checker(name: str, declared: list[tuple[Mechanism, Setting]]) -> Callable[[Any], Any]:
    """A value outside the bounds of every mechanism declaring the setting is refused at
    once; the chosen mechanism's config checks its own bounds again when it is built."""

    def check(value: Any) -> Any:
        whys = [bound_violation(s, value) for _, s in declared]
        if value is not None and all(w is not None for w in whys):
            raise typer.BadParameter(str(whys[0]))
        return value

    setattr(check, MECHANISM_SETTING, name)
    return check


def _annotation(declared: list[tuple[Mechanism, Setting]]) -> Any:
    kind = type(declared[0][1].default)
    if kind is bool:
        return bool | None
    return (float if kind in (int, float) and any(
        isinstance(s.default, float) for _, s in declared
    ) else kind) | None  # fmt: skip


def mechanism_options(into: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a Typer command one option per setting of every registered private mechanism,
    each None by default, and pass the command those given as one dict, ``into``."""
    declared = owners()

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command)
        own = typing.get_type_hints(command)
        kept = [
            p.replace(annotation=own.get(p.name, p.annotation))
            for p in signature.parameters.values()
            if p.name != into
        ]
        added = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=_annotation(owners_),
                default=typer.Option(
                    None,
                    "--" + name.replace("_", "-"),
                    help=_help(name, owners_),
                    callback=_checker(name, owners_),
                ),
            )
            for name, owners_ in declared.items()
        ]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            kwargs[into] = {n: kwargs.pop(n) for n in declared}
            return command(*args, **kwargs)

        params = [*kept, *added]
        params.sort(key=lambda p: p.kind)  # positional ones first, as Python requires
        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        return run

    return decorate
