"""Build a predictor over a loaded ensemble: PMixED or SubMix with their ledgers, or a plain
one (the public model, one adapter, the ensemble average). The one place that maps a method's
name to a :class:`~privlm.predict.protocol.Predictor`, for the CLI and the service."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from privlm.accounting import Budget, PrivacyLedger
from privlm.accounting.analysis import pmixed as pmixed_analysis
from privlm.config import settings_of
from privlm.errors import PrivlmError
from privlm.predict.engine import EnsembleEngine
from privlm.predict.plain import PlainPredictor
from privlm.predict.pmixed import PMixED, PMixEDConfig
from privlm.predict.protocol import Predictor
from privlm.predict.submix import SubMix, SubMixConfig, part_ledgers


def submix_config(
    epsilon: float, alpha: float, beta: float | None, queries: int, delta: float
) -> SubMixConfig:
    """SubMix's config from a deployment's numbers; β defaults to ε/T."""
    return SubMixConfig(
        epsilon, float(alpha), beta if beta is not None else epsilon / queries, delta
    )


def mechanism_defaults(
    method: str, epsilon: float | None, alpha: float | None
) -> tuple[float, float]:
    """ε and α where not given: each mechanism's own (PMixED (8 at δ, α = 3); SubMix RDP
    (2 at α = 2)), from its config class, so the CLI and the service never restate them.
    PMixED's α is returned as an int (its analysis takes integer orders)."""
    cls: type = SubMixConfig if method == "submix" else PMixEDConfig
    s = settings_of(cls)
    eps = s["epsilon"].default if epsilon is None else epsilon
    order = s["alpha"].default if alpha is None else alpha
    if method == "pmixed":
        if order != int(order):
            raise PrivlmError(f"PMixED's order α must be an integer, got {order:g}")
        order = int(order)
    return eps, order


def build_predictor(
    method: str,
    ensemble: Path,
    loaded: tuple[Any, Any, dict[str, Any]],
    ledger: str | Path,
    name: str,
    epsilon: float | None,
    delta: float,
    alpha: float | None,
    queries: int,
    sample_rate: float,
    beta: float | None,
    seed: int | None,
    bound: str = pmixed_analysis.DEFAULT_BOUND,
) -> Predictor:
    """A PMixED or SubMix predictor over an already loaded ensemble (``load_ensemble``),
    its ledger(s) named ``name`` in the database ``ledger`` (a path or a SQLAlchemy URL)."""
    lm, engine, manifest = loaded
    epsilon, alpha = mechanism_defaults(method, epsilon, alpha)
    if method == "pmixed":
        if manifest["protocol"] != "pmixed":
            raise PrivlmError(
                f"{ensemble} is a {manifest['protocol']} ensemble; PMixED needs --protocol pmixed"
            )
        cfg = PMixEDConfig(epsilon, delta, int(alpha), queries, sample_rate, bound)
        led = PrivacyLedger(ledger, name, Budget(epsilon, delta))
        return PMixED(engine, lm.tokenizer, led, cfg, seed)
    if method == "submix":
        if manifest["protocol"] != "submix":
            raise PrivlmError(
                f"{ensemble} is a {manifest['protocol']} ensemble; SubMix needs --protocol submix"
            )
        scfg = submix_config(epsilon, alpha, beta, queries, delta)
        return SubMix(
            engine,
            lm.tokenizer,
            part_ledgers(ledger, name, engine.n_adapters // 2, scfg),
            scfg,
            seed,
        )
    raise PrivlmError(f"unknown method {method!r}; choose pmixed or submix")


def plain_predictor(
    method: str, engine: EnsembleEngine, tokenizer: Any, adapter: int = 0
) -> PlainPredictor:
    """``public`` (the public model), ``finetuned`` (adapter number ``adapter``) or
    ``ensemble`` (the plain average of every adapter: not private, a utility baseline)."""
    rows = {
        "public": [-1],
        "finetuned": [adapter],
        "ensemble": list(range(engine.n_adapters)),
    }.get(method)
    if rows is None:
        raise PrivlmError(f"unknown method {method!r}; choose public, finetuned or ensemble")
    if method == "finetuned" and not 0 <= adapter < engine.n_adapters:
        raise PrivlmError(f"adapter {adapter} is not one of the {engine.n_adapters} adapters")
    return PlainPredictor(engine, tokenizer, rows, method)
