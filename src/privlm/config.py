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
from dataclasses import dataclass, field
from typing import Any

from privlm.errors import PrivlmError

BOUNDS = ("ge", "gt", "le", "lt")


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


def check_settings(config: Any) -> None:
    """Refuse a value outside its bounds or choices, naming the setting."""
    for s in settings_of(type(config)).values():
        why = bound_violation(s, getattr(config, s.name))
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
