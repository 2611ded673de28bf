"""One definition per job setting.

A job's config class (``DpSgdConfig``, ``JftConfig``, ``LoraTrainingConfig`` with
``EnsembleConfig``, ``PMixEDConfig``/``SubMixConfig``, ``PromptDpSgdConfig``,
``PromptPateConfig``) declares each setting once with :func:`setting`: its default, its
bounds and its help text. Everything else is generated from it:

- the CLI option, by :func:`option` (help and bounds included);
- the service's request field, by :func:`request_field` (pydantic bounds and description);
- the check of a built config, by :func:`check_settings` (called in ``__post_init__``).

So a default or a bound can never differ between the library, the CLI and the service; a
test (``tests/test_config_single_source.py``) checks every command and request model.

>>> from dataclasses import dataclass
>>> @dataclass
... class Demo:
...     rate: float = setting(0.5, "a rate", gt=0, le=1)
...     def __post_init__(self) -> None:
...         check_settings(self)
>>> Demo().rate
0.5
>>> Demo(rate=2.0)
Traceback (most recent call last):
...
privlm.errors.PrivlmError: rate must be at most 1, got 2.0
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from privlm.errors import PrivlmError

BOUNDS = ("ge", "gt", "le", "lt")

# the help of settings several config classes share
DEVICE_HELP = (
    "auto (the PRIVLM_DEVICE variable, else CUDA when a GPU is there, else cpu), cpu, cuda "
    "or cuda:N"
)
DTYPE_HELP = (
    "The model's weights: auto (bfloat16 on a GPU that has it, else float32), float32, "
    "bfloat16 or float16. Privacy math always runs in float64"
)
CHECKPOINTING_HELP = (
    "Recompute each layer's activations in the backward pass: less memory for big models, "
    "about a third more compute. DP-SGD stays exact (reentrant checkpointing)"
)
SEED_HELP = (
    "Reproducible experiments only: fixes the noise and sampling, so the privacy guarantee "
    "does not hold against anyone who knows the seed. Default: fresh OS entropy"
)
SECURE_MODE_HELP = (
    "Draw every noise coordinate and Poisson coin from the OS CSPRNG (os.urandom) instead of "
    "a CSPRNG-seeded torch generator. Same accounting; cannot be seeded"
)


@dataclass(frozen=True)
class Setting:
    """What one setting is: default, help text, bounds (pydantic's names) and choices."""

    name: str
    default: Any
    help: str
    bounds: dict[str, float]
    choices: tuple[str, ...] | None

    def describe(self) -> str:
        """The help text with the bounds and choices, as the CLI shows it."""
        parts = [self.help.rstrip(".") + "."]
        if self.choices:
            parts.append(f"One of: {', '.join(self.choices)}.")
        words = {"ge": "≥", "gt": ">", "le": "≤", "lt": "<"}
        if self.bounds:
            parts.append(
                "Range: " + ", ".join(f"{words[k]} {v:g}" for k, v in self.bounds.items()) + "."
            )
        return " ".join(parts)


def setting(
    default: Any,
    help: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple[str, ...] | None = None,
) -> Any:
    """A dataclass field that carries its help text, bounds and choices."""
    bounds = {k: v for k, v in zip(BOUNDS, (ge, gt, le, lt), strict=True) if v is not None}
    meta = {"help": help, "bounds": bounds, "choices": choices}
    if isinstance(default, list | dict | set):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


def with_default(cls: type, name: str, default: Any, help: str | None = None) -> Any:
    """``cls``'s setting ``name`` with another default (and optionally a more specific
    help text), for a config class that shares ``cls``'s settings (bounds and choices stay
    those of the one definition)."""
    s = setting_of(cls, name)
    return setting(default, help or s.help, choices=s.choices, **s.bounds)


def settings_of(cls: type) -> dict[str, Setting]:
    """Every setting of a config class declared with :func:`setting`, by name."""
    out = {}
    for f in dataclasses.fields(cls):
        if "help" not in f.metadata:
            continue
        default = f.default
        if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        out[f.name] = Setting(
            f.name, default, f.metadata["help"], dict(f.metadata["bounds"]), f.metadata["choices"]
        )
    return out


def setting_of(cls: type, name: str) -> Setting:
    found = settings_of(cls).get(name)
    if found is None:
        raise KeyError(f"{cls.__name__} has no setting {name!r}")
    return found


def bound_violation(s: Setting, value: Any) -> str | None:
    """Why ``value`` is outside ``s``'s choices or bounds ("must be …, got …"), or None."""
    if value is None:
        return None
    if s.choices and value not in s.choices:
        return f"must be one of {', '.join(s.choices)}, not {value!r}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value}"
    b = s.bounds
    if "ge" in b and not value >= b["ge"]:
        return f"must be at least {b['ge']:g}, got {value}"
    if "gt" in b and not value > b["gt"]:
        return f"must be greater than {b['gt']:g}, got {value}"
    if "le" in b and not value <= b["le"]:
        return f"must be at most {b['le']:g}, got {value}"
    if "lt" in b and not value < b["lt"]:
        return f"must be less than {b['lt']:g}, got {value}"
    return None


SCALARS: dict[str, Callable[[Any], bool]] = {
    "None": lambda v: v is None,
    "bool": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, numbers.Integral) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, numbers.Real) and not isinstance(v, bool),
    "str": lambda v: isinstance(v, str),
}


def type_violation(annotation: Any, value: Any) -> str | None:
    """Why ``value`` is not of a scalar setting's declared type ("must be …, got …"), or
    None; a setting whose type is not a union of ``SCALARS`` is not checked here."""
    names = [t.strip() for t in str(annotation).split("|")]
    if not names or not all(n in SCALARS for n in names):
        return None
    if any(SCALARS[n](value) for n in names):
        return None
    wanted = " or ".join("None" if n == "None" else f"a{'n' if n == 'int' else ''} {n}"
                         for n in names)  # fmt: skip
    return f"must be {wanted}, got {value!r}"


def check_settings(config: Any) -> None:
    """Refuse a value of another type than its setting declares (a required number given as
    None, a word for a number), or outside its bounds or choices, naming the setting."""
    declared = {f.name: f.type for f in dataclasses.fields(config)}
    for s in settings_of(type(config)).values():
        value = getattr(config, s.name)
        why = type_violation(declared[s.name], value) or bound_violation(s, value)
        if why is not None:
            raise PrivlmError(f"{s.name} {why}")


def option(cls: type, name: str, *decls: str, help: str | None = None, **kw: Any) -> Any:
    """A Typer option for ``cls``'s setting ``name``: its default, help and bounds."""
    import typer

    s = setting_of(cls, name)

    def check(value: Any) -> Any:  # every bound, strict ones (gt, lt) included
        why = bound_violation(s, value)
        if why is not None:
            raise typer.BadParameter(why)
        return value

    check.privlm_setting = (cls, name)  # type: ignore[attr-defined]  # found by the tests
    kw.setdefault("callback", check)
    return typer.Option(s.default, *decls, help=help or s.describe(), **kw)


def cli_settings(
    cls: type,
    *,
    into: str,
    exclude: tuple[str, ...] = (),
    decls: dict[str, tuple[str, ...]] | None = None,
    helps: dict[str, str] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a Typer command one option per setting of ``cls`` (all those declared with
    :func:`setting`, less ``exclude``), each generated by :func:`option`, and pass the
    command their values as one dict, the keyword ``into``. A setting added to the config
    class is then a CLI option with no other edit. ``decls`` gives an option other flags
    (``{"learning_rate": ("--lr",)}``), ``helps`` a more specific help text."""
    import functools
    import inspect
    import typing

    decls, helps = dict(decls or {}), helps or {}
    names = [n for n in settings_of(cls) if n not in exclude]
    hints = typing.get_type_hints(cls)
    for n in names:  # a flag, not --x/--no-x, for a setting that is off by default
        if hints[n] is bool and n not in decls:
            decls[n] = ("--" + n.replace("_", "-"),)

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
                n,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=hints[n],
                default=option(cls, n, *decls.get(n, ()), help=helps.get(n)),
            )
            for n in names
        ]
        positional = [p for p in kept if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        keyword = [p for p in kept if p.kind is inspect.Parameter.KEYWORD_ONLY]
        # the settings come right after the required arguments and options (in --help too)
        required = [i for i, p in enumerate(positional) if _required(p.default)]
        at = required[-1] + 1 if required else 0

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            kwargs[into] = {n: kwargs.pop(n) for n in names}
            return command(*args, **kwargs)

        as_keywords = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in positional[at:]]
        params = [*positional[:at], *added, *as_keywords, *keyword]
        run.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in params}
        if "return" in own:
            run.__annotations__["return"] = own["return"]
        return run

    return decorate


def _required(default: Any) -> bool:
    """Whether a command parameter is required: no default, or a Typer argument or option
    whose default is ``...``."""
    import inspect

    return default is inspect.Parameter.empty or getattr(default, "default", None) is ...


def request_field(cls: type, name: str, **overrides: Any) -> Any:
    """A pydantic field for ``cls``'s setting ``name``: default, bounds and description;
    ``overrides`` may tighten the bounds for the service (never change the default)."""
    from pydantic import Field

    s = setting_of(cls, name)
    if "default" in overrides:
        raise ValueError("a request field takes its default from the config class")
    kw: dict[str, Any] = {**s.bounds, **overrides}
    if s.choices:
        kw.setdefault("pattern", "^(" + "|".join(s.choices) + ")$")
    # where the field comes from, in the schema too (the single-source test finds it there)
    kw.setdefault("json_schema_extra", {"x-privlm-setting": f"{cls.__name__}.{name}"})
    return Field(s.default, description=s.help, **kw)
