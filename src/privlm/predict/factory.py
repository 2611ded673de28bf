"""Build a private predictor (PMixED or SubMix) over a loaded ensemble, with its ledgers:
one place for the CLI and the service."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from privlm.accounting import Budget, PrivacyLedger
from privlm.errors import PrivlmError
from privlm.predict.pmixed import PMixED, PMixEDConfig
from privlm.predict.submix import SubMix, SubMixConfig, part_ledgers


def submix_config(
    epsilon: float, alpha: float, beta: float | None, queries: int, delta: float
) -> SubMixConfig:
    """SubMix's config from a deployment's numbers; β defaults to ε/T."""
    return SubMixConfig(
        epsilon, float(alpha), beta if beta is not None else epsilon / queries, delta
    )


def build_predictor(
    method: str,
    ensemble: Path,
    loaded: tuple[Any, Any, dict[str, Any]],
    ledger: str | Path,
    name: str,
    epsilon: float,
    delta: float,
    alpha: int,
    queries: int,
    sample_rate: float,
    beta: float | None,
    seed: int | None,
) -> Any:
    """A PMixED or SubMix predictor over an already loaded ensemble (``load_ensemble``),
    its ledger(s) named ``name`` in the database ``ledger`` (a path or a SQLAlchemy URL)."""
    lm, engine, manifest = loaded
    if method == "pmixed":
        if manifest["protocol"] != "pmixed":
            raise PrivlmError(
                f"{ensemble} is a {manifest['protocol']} ensemble; PMixED needs --protocol pmixed"
            )
        cfg = PMixEDConfig(epsilon, delta, alpha, queries, sample_rate)
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
