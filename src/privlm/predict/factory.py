"""The one way a predictor is built: :func:`build_predictor` takes a typed config (one
registered mechanism's: :mod:`privlm.predict.mechanisms`) and what it serves (a
:class:`~privlm.predict.loading.LoadedEnsemble`), and returns a
:class:`~privlm.predict.protocol.Predictor`. The CLI, the service and the benchmarks call
this function, and nothing branches on a mechanism's name after it.

**One budget per dataset.** Given the dataset's ledger as ``budget``, a private mechanism
first reserves everything it can ever release on it (its lifetime, as the service does for
a deployment), once per deployment name, and then charges its tokens to the deployment's
own ledger in the same database: a DP-SGD run and a PMixED deployment of the same records
spend one budget (docs/sharp_edges.md, "One ensemble, one budget")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from privlm.accounting import Charge, PrivacyLedger, Relation
from privlm.accounting.ledger import ChargeRecord
from privlm.accounting.statements import guarantee_of_records
from privlm.errors import PrivlmError
from privlm.predict.config import (
    PlainConfig,
    PMixEDConfig,
    PredictorConfig,
    ScreenedPMixEDConfig,
    SubMixConfig,
)
from privlm.predict.loading import LoadedEnsemble
from privlm.predict.mechanisms import mechanism_of
from privlm.predict.plain import PlainPredictor
from privlm.predict.pmixed import PMixED
from privlm.predict.protocol import Predictor
from privlm.predict.screened import ScreenedPMixED
from privlm.predict.submix import SubMix

RESERVATION = "deployment-reservation"


def build_predictor(
    config: PredictorConfig,
    loaded: LoadedEnsemble,
    *,
    ledger: str | Path | None = None,
    name: str = "default",
    seed: int | None = None,
    budget: PrivacyLedger | None = None,
) -> Predictor:
    """The predictor ``config`` describes, over ``loaded`` (``load_ensemble`` or
    ``load_adapter``). A private mixture charges its ledger(s) before each token leaves:
    with ``budget`` (the dataset's ledger), deployment ``name``'s lifetime is reserved on it
    first and the tokens are charged to ``deployment-<name>`` beside it; otherwise to the
    ledger(s) named ``name`` in the database ``ledger`` (a path or a SQLAlchemy URL), a
    budget of their own. ``seed`` is for experiments only (the guarantee is void against
    anyone who knows it)."""
    m = mechanism_of(config)
    target: Any = ledger
    if budget is not None:
        if ledger is not None:
            raise PrivlmError("give the dataset's budget or a ledger of its own, not both")
        members = loaded.manifest.members if loaded.manifest is not None else 1
        reserve(budget, config, members, name)
        target, name = budget._engine, deployment_ledger(name)
    return m.build(config, loaded, target, name, seed)  # type: ignore[no-any-return]


def deployment_ledger(name: str) -> str:
    """The ledger a deployment's tokens are charged to, beside its dataset's budget."""
    return f"deployment-{name}"


def budget_for(budget: PrivacyLedger, relation: Relation) -> PrivacyLedger:
    """The dataset's ledger for ``relation``: its own for a per-unit mechanism; for SubMix's
    per-part figure, a ledger beside it with the same budget (the two are never composed
    into one figure: docs/sharp_edges.md)."""
    if relation.per_unit:
        return budget
    return budget.sibling(f"{budget.name}/per-{relation.value}", budget.budget, relation)


def of_deployment(deployment: str, *, restatements: bool = False) -> Callable[[ChargeRecord], bool]:
    """Selects deployment ``deployment``'s reservation on a dataset's ledger, and with
    ``restatements`` also each restatement of it (mechanism names that begin with
    :data:`RESERVATION`)."""

    def mine(r: ChargeRecord) -> bool:
        named = r.mechanism.startswith(RESERVATION) if restatements else r.mechanism == RESERVATION
        return named and r.params.get("deployment") == deployment

    return mine


def reserve(
    budget: PrivacyLedger,
    config: Any,
    members: int,
    deployment: str,
    params: dict[str, Any] | None = None,
) -> None:
    """Charge deployment ``deployment``'s whole cost (its mechanism's lifetime over
    ``members``) to the dataset's ``budget``, durably, or refuse (BudgetExceededError,
    recording nothing); once: a deployment reserved with the same settings is reused, with
    other settings refused."""
    m = mechanism_of(config)
    cost = m.lifetime(config, members)
    if cost is None:
        return
    target = budget_for(budget, m.relation)
    settings = {k: v for k, v in asdict(config).items() if k in m.settings()}
    for r in filter(of_deployment(deployment), target.charges()):
        if r.params.get("settings") not in (None, settings):
            raise PrivlmError(
                f"deployment {deployment!r} was reserved on {budget.name!r} with other "
                "settings; give it another name (its reservation stands)"
            )
        return
    target.charge(
        Charge(
            RESERVATION, rdp=cost, relation=m.relation,
            unit=m.relation.describe(),
            params={"deployment": deployment, "mechanism": m.name, "settings": settings,
                    **(params or {})},
        )
    )  # fmt: skip


def reserved(budget: PrivacyLedger, config: Any, deployment: str) -> dict[str, Any] | None:
    """What deployment ``deployment``'s reservation on the dataset's ``budget`` records, the
    figure its statement gives (never its settings): (ε, δ) at the config's δ composed from
    the recorded charges (the reservation and any restatement of it, whose mechanism names
    begin with :data:`RESERVATION`), and for a Rényi mechanism its ε at the config's order α. None: no
    reservation is recorded (nothing it answers is covered)."""
    m = mechanism_of(config)
    target = budget_for(budget, m.relation)
    records = list(filter(of_deployment(deployment, restatements=True), target.charges()))
    if not records:
        return None
    g = guarantee_of_records(target, records, getattr(config, "delta", None))
    out: dict[str, Any] = {"epsilon": g.epsilon, "delta": g.delta, "ledger": target.name}
    order = getattr(config, "alpha", None)
    if m.relation is Relation.PART and order is not None and float(order) in target.orders:
        out["order"] = float(order)
        out["rdp_epsilon"] = float(target.recorded_rdp(records, [float(order)])[0])
    return out


def _ensemble_of(loaded: LoadedEnsemble, protocol: str, mechanism: str) -> None:
    manifest = loaded.manifest
    if manifest is None:
        raise PrivlmError(f"{mechanism} mixes an ensemble; one adapter alone cannot serve it")
    if manifest.protocol != protocol:
        raise PrivlmError(
            f"this is a {manifest.protocol} ensemble; {mechanism} needs --protocol {protocol}"
        )


def _target(ledger: Any, mechanism: str) -> Any:
    if ledger is None:
        raise PrivlmError(f"{mechanism} charges every token to a ledger: name one")
    return ledger


def build_pmixed(
    config: PMixEDConfig, loaded: LoadedEnsemble, ledger: Any, name: str, seed: int | None
) -> Predictor:
    _ensemble_of(loaded, "pmixed", "PMixED")
    (led,) = mechanism_of(config).open_ledgers(_target(ledger, "PMixED"), name, config, 0)  # type: ignore[misc]
    return PMixED(loaded.engine, loaded.model.tokenizer, led, config, seed)


def build_screened(
    config: ScreenedPMixEDConfig, loaded: LoadedEnsemble, ledger: Any, name: str, seed: int | None
) -> Predictor:
    _ensemble_of(loaded, "pmixed", "Screened PMixED")
    (led,) = mechanism_of(config).open_ledgers(  # type: ignore[misc]
        _target(ledger, "Screened PMixED"), name, config, 0
    )
    return ScreenedPMixED(loaded.engine, loaded.model.tokenizer, led, config, seed)


def build_submix(
    config: SubMixConfig, loaded: LoadedEnsemble, ledger: Any, name: str, seed: int | None
) -> Predictor:
    _ensemble_of(loaded, "submix", "SubMix")
    ledgers = mechanism_of(config).open_ledgers(  # type: ignore[misc]
        _target(ledger, "SubMix"), name, config, loaded.engine.n_adapters
    )
    return SubMix(loaded.engine, loaded.model.tokenizer, ledgers, config, seed)


def build_plain(
    config: PlainConfig, loaded: LoadedEnsemble, ledger: Any, name: str, seed: int | None
) -> Predictor:
    n = loaded.engine.n_adapters
    if config.members == "adapter" and config.adapter >= n:
        raise PrivlmError(f"adapter {config.adapter} is not one of the {n} adapters")
    rows = {"public": [-1], "adapter": [config.adapter], "ensemble": list(range(n))}
    method = config.members
    if config.members == "adapter" and loaded.manifest is not None:
        method = "finetuned"  # an ensemble member, scored as a non-private baseline
    return PlainPredictor(
        loaded.engine, loaded.model.tokenizer, rows[config.members], method,
        dict(config.statement), seed,
    )  # fmt: skip


def plain_config(method: str, adapter: int = 0) -> PlainConfig:
    """``eval ppl``'s baselines by name: ``public``, ``finetuned`` (one member) or
    ``ensemble`` (their plain average)."""
    members = {"public": "public", "finetuned": "adapter", "ensemble": "ensemble"}.get(method)
    if members is None:
        raise PrivlmError(f"unknown method {method!r}; choose public, finetuned or ensemble")
    return PlainConfig(members=members, adapter=adapter)
