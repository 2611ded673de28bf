"""The one way a predictor is built: :func:`build_predictor` takes a typed config
(:class:`PMixEDConfig`, :class:`ScreenedPMixEDConfig`, :class:`SubMixConfig` or
:class:`PlainConfig`) and what it serves (a
:class:`~privlm.predict.loading.LoadedEnsemble`), and returns a
:class:`~privlm.predict.protocol.Predictor`. Each config type has one builder, registered
here; the CLI, the service and the benchmarks call this function, and nothing branches on a
mechanism's name after it (a new mechanism registers its config type with
:func:`register_builder`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from privlm.accounting import Budget, PrivacyLedger
from privlm.errors import PrivlmError
from privlm.predict.config import (
    PlainConfig,
    PMixEDConfig,
    PredictorConfig,
    ScreenedPMixEDConfig,
    SubMixConfig,
)
from privlm.predict.loading import LoadedEnsemble
from privlm.predict.plain import PlainPredictor
from privlm.predict.pmixed import PMixED
from privlm.predict.protocol import Predictor
from privlm.predict.screened import ScreenedPMixED
from privlm.predict.submix import SubMix, part_ledgers

C = TypeVar("C")
Builder = Callable[[Any, LoadedEnsemble, "str | Path | None", str, "int | None"], Predictor]
_BUILDERS: dict[type, Builder] = {}


def register_builder(config_type: type[C]) -> Callable[[Builder], Builder]:
    """Register the builder of the predictors configured by ``config_type``."""

    def register(builder: Builder) -> Builder:
        _BUILDERS[config_type] = builder
        return builder

    return register


def build_predictor(
    config: PredictorConfig,
    loaded: LoadedEnsemble,
    *,
    ledger: str | Path | None = None,
    name: str = "default",
    seed: int | None = None,
) -> Predictor:
    """The predictor ``config`` describes, over ``loaded`` (``load_ensemble`` or
    ``load_adapter``). A private mixture charges its ledger(s) named ``name`` in the
    database ``ledger`` (a path or a SQLAlchemy URL) before each token leaves; ``seed`` is
    for experiments only (the guarantee is void against anyone who knows it)."""
    builder = _BUILDERS.get(type(config))
    if builder is None:
        raise PrivlmError(f"no predictor is built from a {type(config).__name__}")
    return builder(config, loaded, ledger, name, seed)


def _ensemble_of(loaded: LoadedEnsemble, protocol: str, mechanism: str) -> None:
    manifest = loaded.manifest
    if manifest is None:
        raise PrivlmError(f"{mechanism} mixes an ensemble; one adapter alone cannot serve it")
    if manifest.protocol != protocol:
        raise PrivlmError(
            f"this is a {manifest.protocol} ensemble; {mechanism} needs --protocol {protocol}"
        )


def _ledger_url(ledger: str | Path | None, mechanism: str) -> str | Path:
    if ledger is None:
        raise PrivlmError(f"{mechanism} charges every token to a ledger: name one")
    return ledger


@register_builder(PMixEDConfig)
def _pmixed(
    config: PMixEDConfig, loaded: LoadedEnsemble, ledger: str | Path | None, name: str,
    seed: int | None,
) -> Predictor:  # fmt: skip
    _ensemble_of(loaded, "pmixed", "PMixED")
    led = PrivacyLedger(_ledger_url(ledger, "PMixED"), name, Budget(config.epsilon, config.delta))
    return PMixED(loaded.engine, loaded.model.tokenizer, led, config, seed)


@register_builder(ScreenedPMixEDConfig)
def _screened(
    config: ScreenedPMixEDConfig, loaded: LoadedEnsemble, ledger: str | Path | None, name: str,
    seed: int | None,
) -> Predictor:  # fmt: skip
    _ensemble_of(loaded, "pmixed", "Screened PMixED")
    url = _ledger_url(ledger, "Screened PMixED")
    led = PrivacyLedger(url, name, Budget(config.epsilon, config.delta))
    return ScreenedPMixED(loaded.engine, loaded.model.tokenizer, led, config, seed)


@register_builder(SubMixConfig)
def _submix(
    config: SubMixConfig, loaded: LoadedEnsemble, ledger: str | Path | None, name: str,
    seed: int | None,
) -> Predictor:  # fmt: skip
    _ensemble_of(loaded, "submix", "SubMix")
    ledgers = part_ledgers(
        _ledger_url(ledger, "SubMix"), name, loaded.engine.n_adapters // 2, config
    )
    return SubMix(loaded.engine, loaded.model.tokenizer, ledgers, config, seed)


@register_builder(PlainConfig)
def _plain(
    config: PlainConfig, loaded: LoadedEnsemble, ledger: str | Path | None, name: str,
    seed: int | None,
) -> Predictor:  # fmt: skip
    n = loaded.engine.n_adapters
    if config.members == "adapter" and config.adapter >= n:
        raise PrivlmError(f"adapter {config.adapter} is not one of the {n} adapters")
    rows = {"public": [-1], "adapter": [config.adapter], "ensemble": list(range(n))}
    method = config.members
    if config.members == "adapter" and loaded.manifest is not None:
        method = "finetuned"  # an ensemble member, scored as a non-private baseline
    return PlainPredictor(
        loaded.engine, loaded.model.tokenizer, rows[config.members], method,
        dict(config.statement),
    )  # fmt: skip


def plain_config(method: str, adapter: int = 0) -> PlainConfig:
    """``eval ppl``'s baselines by name: ``public``, ``finetuned`` (one member) or
    ``ensemble`` (their plain average)."""
    members = {"public": "public", "finetuned": "adapter", "ensemble": "ensemble"}.get(method)
    if members is None:
        raise PrivlmError(f"unknown method {method!r}; choose public, finetuned or ensemble")
    return PlainConfig(members, adapter)
