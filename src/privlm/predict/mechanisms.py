"""Every way of serving an ensemble or an adapter, one registered record each (in the spirit
of PEFT's ``register_peft_method``): its name, its keyword-only config class, how it is
built, what a deployment reserves on its dataset's budget, the guarantee it states with its
relation, the ledgers it opens, and what it serves.

Everything that offers a mechanism reads it from here, so a new mechanism is its module plus
one :func:`register_mechanism`:

- the CLI's ``--method`` and its options in ``generate`` and ``eval ppl`` (the union of every
  mechanism's settings), and ``privlm plan <mechanism>`` (:mod:`privlm.cli.predict`,
  :mod:`privlm.cli.plan`);
- the service's deployment request, a union discriminated by ``mechanism``, one variant per
  mechanism with every setting a field or withheld with its reason
  (:func:`privlm.service.deployments.deployment_request`), the reservation, the guarantee
  and the ledgers of a deployment;
- the page's deploy form (``GET /v1/mechanisms``).

This module imports no torch: a builder is named by its import path and imported when a
predictor is built (``privlm generate --help`` and the service's request models read the
registry without loading a model library).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from privlm.accounting.analysis import pmixed_bounds
from privlm.accounting.relations import Relation
from privlm.config import Setting, settings_of
from privlm.errors import PrivlmError
from privlm.predict.config import (
    PlainConfig,
    PMixEDConfig,
    ScreenedPMixEDConfig,
    SubMixConfig,
    part_ledgers,
)

if TYPE_CHECKING:
    from privlm.accounting import RdpCurve

Builder = Callable[..., Any]  # (config, loaded, ledger, name, seed) -> Predictor


@dataclass(frozen=True)
class Guarantee:
    """What a mechanism's answers guarantee, in the words the CLI, the API and the page use:
    ``kind`` ("DP", "RDP", "SDP" or "DP release" for an adapter), the neighbouring relation,
    one sentence, and the Rényi order of an RDP statement."""

    kind: str
    relation: str
    text: str
    order: float | None = None
    epsilon: float | None = None  # the recorded figure, where the statement is (ε, δ)
    delta: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "relation": self.relation, "text": self.text}
        extra = {"order": self.order, "epsilon": self.epsilon, "delta": self.delta}
        return {**out, **{k: v for k, v in extra.items() if v is not None}}


@dataclass(frozen=True)
class Mechanism:
    """One registered way of serving: see the module docstring.

    - ``serves``: what it runs on: an ensemble's protocol (``pmixed``, ``submix``) or
      ``adapter`` (one DP-trained adapter).
    - ``builder``: ``"module:function"`` or a callable, ``(config, loaded, ledger, name,
      seed) -> Predictor``.
    - ``lifetime(config, members)``: everything a deployment can ever release about its
      dataset, reserved on the dataset's budget when it is made (None: nothing more).
    - ``guarantee(config, statement)``: what its answers guarantee, from what was recorded
      (``statement``: a served adapter's ``privacy.json`` facts; ``reserved``: the figures
      of the deployment's reservation on its dataset's budget, or absent when none is).
    - ``open_ledgers(target, name, config, members)``: the ledgers a deployment opens.
    - ``relation``: the neighbouring relation of its charges and reservation.
    - ``contextual(given, context)``: defaults that follow other values (SubMix's β = ε/T)
      or the call (``eval ppl``'s T = the tokens it scores; an adapter's statement).
    - ``withheld``: settings a service tenant may not set, with the reason; ``fixed``: the
      value such a setting takes in the service; ``derived``: settings ``contextual``
      derives when not given (a request leaves them None), with how.
    - ``plan(config, members)``: what ``privlm plan`` shows (a dict, ``lines`` for people).
    - ``servable(config)``: refuses, with the reason, a config that may be planned but not
      served (PMixED's per-part bounds); :meth:`serving_config` calls it.
    """

    name: str
    config: type
    summary: str
    serves: str
    builder: str | Builder
    lifetime: Callable[[Any, int], RdpCurve | None]
    guarantee: Callable[[Any, Mapping[str, Any]], Guarantee]
    open_ledgers: Callable[[Any, str, Any, int], list[Any]] | None = None
    relation: Relation = Relation.UNIT  # what its charges and its reservation are for
    charges_tokens: bool = True
    contextual: Callable[[Mapping[str, Any], Mapping[str, Any]], dict[str, Any]] | None = None
    withheld: Mapping[str, str] = field(default_factory=dict)
    fixed: Mapping[str, Any] = field(default_factory=dict)
    derived: Mapping[str, str] = field(default_factory=dict)
    plan: Callable[[Any, int], dict[str, Any]] | None = None
    servable: Callable[[Any], None] | None = None

    def settings(self) -> dict[str, Setting]:
        return settings_of(self.config)

    def make_config(
        self, given: Mapping[str, Any] | None = None, context: Mapping[str, Any] | None = None
    ) -> Any:
        """The config from the settings given (None: not given), each other one its
        default, or what ``contextual`` derives; a setting of another mechanism is refused,
        naming what this one takes."""
        own = self.settings()
        values = {k: v for k, v in (given or {}).items() if v is not None}
        unknown = sorted(set(values) - set(own))
        if unknown:
            raise PrivlmError(
                f"{', '.join(unknown)}: not a setting of {self.name} (it takes "
                f"{', '.join(own) or 'none'})"
            )
        if self.contextual is not None:
            values = {**self.contextual(values, context or {}), **values}
        return self.config(**values)

    def serving_config(
        self, given: Mapping[str, Any] | None = None, context: Mapping[str, Any] | None = None
    ) -> Any:
        """:meth:`make_config`, refused at once if this mechanism would refuse to serve it."""
        config = self.make_config(given, context)
        if self.servable is not None:
            self.servable(config)
        return config

    def build(self, config: Any, loaded: Any, ledger: Any, name: str, seed: int | None) -> Any:
        builder = self.builder
        if isinstance(builder, str):
            module, attribute = builder.split(":")
            builder = getattr(importlib.import_module(module), attribute)
        return builder(config, loaded, ledger, name, seed)


_REGISTRY: dict[str, Mechanism] = {}


def register_mechanism(mechanism: Mechanism) -> Mechanism:
    """Add ``mechanism`` (replacing one of the same name); returns it."""
    if not mechanism.name.isidentifier():
        raise PrivlmError(f"a mechanism's name is an identifier, got {mechanism.name!r}")
    _REGISTRY[mechanism.name] = mechanism
    return mechanism


def unregister_mechanism(name: str) -> None:
    _REGISTRY.pop(name, None)


def mechanisms() -> list[Mechanism]:
    """Every registered mechanism, in registration order."""
    return list(_REGISTRY.values())


def mechanism(name: str) -> Mechanism:
    found = _REGISTRY.get(name)
    if found is None:
        raise PrivlmError(f"unknown mechanism {name!r}; choose one of {', '.join(_REGISTRY)}")
    return found


def mechanism_of(config: Any) -> Mechanism:
    """The mechanism a config belongs to (by its exact type)."""
    for m in _REGISTRY.values():
        if type(config) is m.config:
            return m
    raise PrivlmError(f"no mechanism is configured by a {type(config).__name__}")


def private_mechanism(name: str) -> Mechanism:
    """A registered mechanism that charges each token (``--method`` of generate and eval)."""
    found = _REGISTRY.get(name)
    if found is None or not found.charges_tokens:
        names = ", ".join(m.name for m in private_mechanisms())
        raise PrivlmError(f"unknown private mechanism {name!r}; choose one of {names}")
    return found


def private_mechanisms() -> list[Mechanism]:
    """The mechanisms that charge each token (``generate``'s and ``eval ppl``'s methods)."""
    return [m for m in _REGISTRY.values() if m.charges_tokens]


def serving(target: str) -> list[Mechanism]:
    """The mechanisms that can serve ``target`` (an ensemble's protocol, or ``adapter``)."""
    return [m for m in _REGISTRY.values() if m.serves == target]


# -- the built-in mechanisms ------------------------------------------------------------------

PER_UNIT = Relation.UNIT.describe()
MIXTURE_RELATION = PER_UNIT + "; adding or removing one unit replaces one ensemble member's model"


def _pmixed_context(given: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """``eval ppl`` scores every token as one query: T is the tokens it scores."""
    return {"queries": context["queries"]} if "queries" in context else {}


def _submix_context(given: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    """β = ε/T of its own ε and T (T: the call's queries, else PMixED's default T)."""
    eps = given.get("epsilon", settings_of(SubMixConfig)["epsilon"].default)
    queries = context.get("queries", settings_of(PMixEDConfig)["queries"].default)
    return {"beta": eps / queries}


def _adapter_context(given: Mapping[str, Any], context: Mapping[str, Any]) -> dict[str, Any]:
    return {"members": "adapter", "statement": dict(context.get("statement", {}))}


UNRESERVED = "no reservation is recorded on its dataset's budget, so nothing it answers is covered"


def _recorded(statement: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The figures of the deployment's recorded reservation (``reserved`` in
    ``statement``, from :func:`privlm.predict.factory.reserved`), or None."""
    found = statement.get("reserved")
    return found if isinstance(found, Mapping) else None


def _pmixed_guarantee(cfg: PMixEDConfig, statement: Mapping[str, Any]) -> Guarantee:
    from privlm.accounting.statements import guarantee_text  # the ledger: SQLAlchemy

    got = _recorded(statement)
    if got is None:
        return Guarantee("DP", MIXTURE_RELATION, UNRESERVED)
    return Guarantee(
        "DP", MIXTURE_RELATION,
        f"{guarantee_text(got['epsilon'], got['delta'])} over all its private tokens, as "
        "reserved on its dataset's budget, per unit of the dataset (adding or removing one "
        "unit replaces one ensemble member's model)",
        epsilon=got["epsilon"], delta=got["delta"],
    )  # fmt: skip


def _screened_guarantee(cfg: ScreenedPMixEDConfig, statement: Mapping[str, Any]) -> Guarantee:
    from privlm.accounting.statements import guarantee_text  # the ledger: SQLAlchemy

    got = _recorded(statement)
    if got is None:
        return Guarantee("DP", MIXTURE_RELATION, UNRESERVED)
    return Guarantee(
        "DP", MIXTURE_RELATION,
        f"{guarantee_text(got['epsilon'], got['delta'])} over its {cfg.paid_tokens} paid tokens "
        "and any number of free ones (a sparse-vector screen sends each query to the public "
        "model or to a paid PMixED query), as reserved on its dataset's budget, per unit of "
        "the dataset (adding or removing one unit replaces one ensemble member's model)",
        epsilon=got["epsilon"], delta=got["delta"],
    )  # fmt: skip


def _submix_guarantee(cfg: SubMixConfig, statement: Mapping[str, Any]) -> Guarantee:
    got = _recorded(statement)
    if got is None or "rdp_epsilon" not in got:
        return Guarantee("RDP", Relation.PART.describe(), UNRESERVED, order=cfg.alpha)
    return Guarantee(
        "RDP", Relation.PART.describe(),
        f"(α={got['order']:g}, ε={got['rdp_epsilon']:.4g})-Rényi operational privacy per "
        "part (a part removed), as reserved on its dataset's budget, not a per-unit DP "
        "guarantee",
        order=got["order"],
    )  # fmt: skip


def _adapter_guarantee(cfg: PlainConfig, statement: Mapping[str, Any]) -> Guarantee:
    if statement.get("guarantee_kind") == "SDP":
        return Guarantee(
            "SDP", PER_UNIT,
            f"(ε, δ)-SDP under the policy '{statement.get('policy')}': what the policy flags "
            "is protected; its tokens are post-processing of that release",
        )  # fmt: skip
    return Guarantee(
        "DP", PER_UNIT, "a DP-trained adapter: its tokens are post-processing of its release"
    )


def _per_unit_only(cfg: PMixEDConfig) -> None:
    """A PMixED deployment is charged per unit: the paper's per-part bounds only plan."""
    pmixed_bounds.check_per_unit(cfg.bound)


def _planner(name: str) -> Callable[[Any, int], dict[str, Any]]:
    """``privlm.predict.planning.<name>``, imported when a plan is made (it loads the
    analysis, and with it NumPy, which ``--help`` does not need)."""

    def plan(config: Any, members: int) -> dict[str, Any]:
        planner: Callable[[Any, int], dict[str, Any]]
        planner = getattr(importlib.import_module("privlm.predict.planning"), name)
        return planner(config, members)

    return plan


def _pmixed_ledgers(target: Any, name: str, cfg: Any, members: int) -> list[Any]:
    from privlm.accounting import Budget, PrivacyLedger

    return [PrivacyLedger(target, name, Budget(cfg.epsilon, cfg.delta))]


def _submix_ledgers(target: Any, name: str, cfg: SubMixConfig, members: int) -> list[Any]:
    return part_ledgers(target, name, members // 2, cfg)


register_mechanism(
    Mechanism(
        "pmixed",
        PMixEDConfig,
        "PMixED (Flemings et al.): each token from the ensemble's members mollified toward "
        "the public model, charged per unit before it leaves",
        serves="pmixed",
        builder="privlm.predict.factory:build_pmixed",
        lifetime=lambda cfg, n: cfg.lifetime_curve(n),
        guarantee=_pmixed_guarantee,
        open_ledgers=_pmixed_ledgers,
        contextual=_pmixed_context,
        plan=_planner("plan_pmixed"),
        servable=_per_unit_only,
    )
)
register_mechanism(
    Mechanism(
        "screened",
        ScreenedPMixEDConfig,
        "Screened PMixED: a sparse-vector test sends each query to the public model (free) "
        "or to a paid PMixED query",
        serves="pmixed",
        builder="privlm.predict.factory:build_screened",
        lifetime=lambda cfg, n: cfg.lifetime_curve(n),
        guarantee=_screened_guarantee,
        open_ledgers=_pmixed_ledgers,
        withheld={
            "when_spent": "a deployment refuses once its paid tokens are spent; its "
            "fallback answers from the public model instead"
        },
        fixed={"when_spent": "refuse"},
        plan=_planner("plan_screened"),
    )
)
register_mechanism(
    Mechanism(
        "submix",
        SubMixConfig,
        "SubMix (Ginart et al.): operational privacy per part, with STOP",
        serves="submix",
        builder="privlm.predict.factory:build_submix",
        lifetime=lambda cfg, n: cfg.lifetime_curve(),
        guarantee=_submix_guarantee,
        open_ledgers=_submix_ledgers,
        relation=Relation.PART,
        contextual=_submix_context,
        derived={
            "beta": "SubMix's target leakage β per query; default ε/T of its own ε (T = "
            "PMixED's default query budget, 1024)"
        },
        plan=_planner("plan_submix"),
    )
)
register_mechanism(
    Mechanism(
        "adapter",
        PlainConfig,
        "One DP-trained adapter (DP-SGD or JFT): its tokens are post-processing of its "
        "release, and cost nothing more",
        serves="adapter",
        builder="privlm.predict.factory:build_plain",
        lifetime=lambda cfg, n: None,
        guarantee=_adapter_guarantee,
        charges_tokens=False,
        contextual=_adapter_context,
        withheld={
            "members": "an adapter deployment serves its one adapter",
            "adapter": "an adapter deployment serves its one adapter",
        },
    )
)
