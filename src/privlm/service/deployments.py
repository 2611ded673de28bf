"""Deployments: a trained ensemble served privately (PMixED or SubMix), or a DP-trained
adapter, behind an OpenAI-style completions call.

Every private token is charged to the deployment's ledger (``deployment-<id>``, in the
service database) in a committed transaction before it is released; generation for one
deployment runs on its scheduler's one thread (:mod:`privlm.service.scheduler`), so its
ledger sees one query at a time. When the budget is spent a request is refused (HTTP 429),
or, if the deployment was created with ``fallback``, answered by the public model and
flagged as such (:mod:`privlm.service.release`).
"""

from __future__ import annotations

import json
import threading
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Discriminator, Field, Tag, TypeAdapter, create_model

from privlm.accounting import Charge, PrivacyLedger, RdpCurve, Relation
from privlm.accounting.analysis.pmixed import REPLACEMENT
from privlm.config import request_field
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.models.pool import ModelPool
from privlm.predict.config import PlainConfig
from privlm.predict.factory import (
    RESERVATION,
    build_predictor,
    deployment_ledger,
    of_deployment,
    reserve,
    reserved,
)
from privlm.predict.loading import LoadedEnsemble, load_adapter, load_ensemble
from privlm.predict.mechanisms import Mechanism, mechanism, mechanisms, serving
from privlm.predict.pmixed import UNIT as PMIXED_UNIT
from privlm.predict.pmixed import PMixED, shortfall
from privlm.predict.protocol import Predictor
from privlm.service.admission import SchedulerLimits, TenantGate
from privlm.service.db import Deployment, Job
from privlm.service.job_kinds import serves, stored_params
from privlm.service.scheduler import DeploymentScheduler
from privlm.service.strict import STRICT_BODY

LEGACY_BOUND = "jensen"  # what deployments stored without a bound were reserved with
RESTATEMENT = f"{RESERVATION}-restatement"  # read with the reservation: factory.reserved
MAX_DERIVED = 1000.0  # the service's ceiling on a derived setting a request gives


def _variant(m: Mechanism) -> type[BaseModel]:
    """The request for a deployment of ``m``: the job, the mechanism and, for a mechanism
    that charges tokens, ``fallback``; then every setting of ``m``'s config class, its
    default, bounds and help from there, except those withheld (with the reason) and those a
    mechanism derives from the others (None until then)."""
    fields: dict[str, Any] = {
        "job_id": (str, Field(..., max_length=40)),
        "mechanism": (Literal[m.name], Field(m.name, description=m.summary)),
    }
    if m.charges_tokens:
        fields["fallback"] = (
            bool,
            Field(False, description="answer from the public model once spent"),
        )
    hints = typing.get_type_hints(m.config)
    for name in m.settings():
        if name in m.withheld:
            continue
        if name in m.derived:  # None until derived, within its setting's bounds
            bounds: dict[str, Any] = {"le": MAX_DERIVED, **m.settings()[name].bounds}
            fields[name] = (hints[name] | None, Field(None, description=m.derived[name], **bounds))
        else:
            fields[name] = (hints[name], request_field(m.config, name))
    title = "".join(w.title() for w in m.name.split("_")) + "Deployment"
    model: type[BaseModel] = create_model(title, __config__=STRICT_BODY, **fields)
    setattr(model, "WITHHELD", dict(m.withheld))  # noqa: B010  # found by the tests
    setattr(model, "DERIVED", dict(m.derived))  # noqa: B010
    setattr(model, "privlm_mechanism", m.name)  # noqa: B010
    return model


def _tag(value: Any) -> str:
    mechanism = (
        value.get("mechanism") if isinstance(value, dict) else getattr(value, "mechanism", None)
    )
    return str(mechanism or "pmixed")


def deployment_request() -> Any:
    """``POST /v1/deployments``'s body: a union of every registered mechanism's request,
    discriminated by ``mechanism`` (default ``pmixed``)."""
    variants = [Annotated[_variant(m), Tag(m.name)] for m in mechanisms()]
    return Annotated[Union[tuple(variants)], Discriminator(_tag)]  # noqa: UP007


def parse_request(body: dict[str, Any]) -> Any:
    """A deployment's settings, typed by the union (errors name the field)."""
    return TypeAdapter(deployment_request()).validate_python(body)


def stored_request(row: Deployment) -> Any:
    """A stored deployment's settings, read back: those its mechanism's request has (rows
    stored before every setting was checked against its mechanism hold them all). Every
    PMixED deployment answers under the per-unit bound, whatever it was stored with."""
    raw = json.loads(row.params)
    m = mechanism(raw.get("mechanism", "pmixed"))
    kept = {k: v for k, v in raw.items() if k in _variant(m).model_fields}
    if "bound" in kept:
        kept["bound"] = REPLACEMENT
    return parse_request({**kept, "mechanism": m.name})


def request_config(req: Any, statement: Mapping[str, Any] | None = None) -> Any:
    """The typed config a deployment's predictor is built from: its mechanism's settings
    from the request, the withheld ones at their service value, derived ones derived."""
    m = mechanism(req.mechanism)
    given = {k: getattr(req, k) for k in m.settings() if k in type(req).model_fields}
    return m.serving_config({**given, **m.fixed}, {"statement": statement or {}})


@dataclass
class LoadedDeployment:
    """A deployment ready to answer: its predictor (PMixED, SubMix or a DP adapter, behind
    one interface), the public model for a fallback, and the scheduler that generates for it
    (one thread: its ledger sees one query at a time)."""

    row: Deployment
    predictor: Predictor
    public: Predictor
    scheduler: DeploymentScheduler

    @property
    def tokenizer(self) -> Any:
        return self.predictor.tokenizer

    def budget(self) -> dict[str, Any]:
        out = {"deployment": self.row.id, **self.predictor.budget()}
        if self.predictor.charges_tokens:
            out["fallback"] = self.row.fallback
            out["note"] += (
                " The deployment's whole cost was reserved on its dataset's budget at creation."
            )
        return out

    def spent_text(self) -> str:
        b = self.predictor.budget()
        if "rdp_epsilon" in b["spent"]:
            return (
                f"RDP ε {b['spent']['rdp_epsilon']:.4g} of {b['budget']['rdp_epsilon']:g} at "
                f"order α={b['budget']['order']:g}"
            )
        return (
            f"ε {b['spent']['epsilon']:.4g} of {b['budget']['epsilon']:g} at δ "
            f"{b['budget']['delta']:g}"
        )

    @property
    def context_tokens(self) -> int:
        """The most tokens a prompt and its completion may have together."""
        config = self.scheduler.batch.engine.model.config
        return int(getattr(config, "max_position_embeddings", 2048))


class DeploymentRuntime:
    """Loaded deployments, kept in memory; each is loaded on its first request."""

    def __init__(self, ledger_url: str, limits: SchedulerLimits | None = None) -> None:
        self.ledger_url = ledger_url
        self.limits = limits or SchedulerLimits()
        self.gate = TenantGate(self.limits.tenant_max, self.limits.max_queue)
        self._loaded: dict[str, LoadedDeployment] = {}
        self._lock = threading.Lock()
        self.models = ModelPool()  # one copy of each public model, shared by deployments

    def stop(self, deployment_id: str) -> None:
        """Unload a deployment (its row was deleted): completions already taken finish,
        nothing more is admitted, and its generation thread ends."""
        with self._lock:
            loaded = self._loaded.pop(deployment_id, None)
        if loaded is not None:
            loaded.scheduler.close()

    def get(self, row: Deployment, job: Job, budget: str | None = None) -> LoadedDeployment:
        """The loaded deployment; ``budget`` names its dataset's ledger (a legacy
        reservation is restated there on the first load)."""
        with self._lock:
            if row.id not in self._loaded:
                self._loaded[row.id] = load_deployment(
                    row, job, self.ledger_url, self.models, (self.limits, self.gate), budget
                )
            return self._loaded[row.id]


def load_deployment(
    row: Deployment, job: Job, ledger_url: str, models: ModelPool | None = None,
    scheduling: tuple[SchedulerLimits, TenantGate] | None = None,
    budget: str | None = None,
) -> LoadedDeployment:  # fmt: skip
    """A deployment ready to answer, its public model taken from ``models`` (the serve
    --device policy) so that deployments of one model share its weights."""
    models = models if models is not None else ModelPool()
    raw = json.loads(row.params)
    loaded, statement = _served(job, models)
    predictor = build_predictor(
        request_config(stored_request(row), statement), loaded, ledger=ledger_url,
        name=deployment_ledger(row.id),
    )  # fmt: skip
    if isinstance(predictor, PMixED) and deployment_bound(raw) != REPLACEMENT:
        restate_reservation(ledger_url, job, row, predictor, budget)
    public = build_predictor(PlainConfig(members="public"), loaded)
    default = SchedulerLimits()
    limits, gate = scheduling or (default, TenantGate(default.tenant_max, default.max_queue))
    return LoadedDeployment(
        row, predictor, public, DeploymentScheduler(row.id, loaded.engine, limits, gate)
    )


STATEMENT_FACTS = ("epsilon", "delta", "mechanism", "guarantee_kind", "policy", "dp_epsilon",
                   "not_dp")  # fmt: skip


def _served(job: Job, models: ModelPool) -> tuple[LoadedEnsemble, dict[str, Any]]:
    """What a job's deployment serves: its ensemble, or its one DP adapter with what the
    adapter's ``privacy.json`` states."""
    out = Path(job.output_dir)
    if serves(job) != "adapter":
        return load_ensemble(out, pool=models), {}
    statement = json.loads((out / "privacy.json").read_text())
    facts = {k: statement[k] for k in STATEMENT_FACTS if k in statement}
    return load_adapter(out, stored_params(job).model, pool=models), facts


def deployment_bound(params: dict[str, Any]) -> str:
    """The PMixED bound a deployment's budget was reserved with. One stored without a bound
    was reserved with Jensen's per-part curve; every deployment now answers under the
    per-unit (replacement) bound, whatever it was reserved with (docs/sharp_edges.md)."""
    return str(params.get("bound", LEGACY_BOUND))


def restate_reservation(
    ledger_url: str, job: Job, row: Deployment, predictor: Predictor, budget: str | None = None
) -> None:
    """A deployment reserved under a per-part bound: its lifetime, restated per unit, is
    compared with what its dataset's ledger reserved, and the excess is recorded there once,
    durably. The lifetime is what its tokens cost per unit, each at the radius and order it
    was released with (the PMixED predictor has restated its own ledger: a restatement that
    did not fit is recorded there as an overdraft), plus the queries left at the radius that
    fits. If the excess does not fit the dataset's budget, it is recorded as an overdraft
    all the same (the tokens were released), so the dataset refuses all further work and
    says why, and the deployment refuses every further private token."""
    if not isinstance(predictor, PMixED):
        return
    dataset = PrivacyLedger(ledger_url, budget or f"dataset-{job.dataset_id}")
    records = dataset.charges()
    if any(r.mechanism == RESTATEMENT and r.params.get("deployment") == row.id for r in records):
        return
    reserved = list(filter(of_deployment(row.id), records))
    grid = dataset.orders
    released = predictor.ledger.recorded_rdp(predictor.ledger.charges(), grid)
    left = predictor.queries_left() if predictor.refusal is None else 0
    lifetime = released + left * predictor.query_curve.at(grid) if left else released
    charge = Charge(
        RESTATEMENT,
        rdp=RdpCurve.from_arrays(grid, shortfall(lifetime, dataset.recorded_rdp(reserved, grid))),
        unit=PMIXED_UNIT,
        relation=Relation.UNIT,
        params={"deployment": row.id, "job": job.id, "bound": REPLACEMENT},
    )
    try:
        dataset.charge(charge)
    except BudgetExceededError:
        dataset.record_overdraft(
            charge,
            f"deployment {row.id} released tokens under the per-part PMixED bound; restated "
            "per unit (one member replaced), they cost more than this dataset's budget "
            "(docs/sharp_edges.md)",
        )
        predictor.refusal = (
            f"refused: deployment {row.id} was reserved under the per-part PMixED bound; "
            "restated per unit (one member replaced) its tokens no longer fit its dataset's "
            "budget (docs/sharp_edges.md), so no further private tokens are released"
        )


def deployment_guarantee(
    row: Deployment, job: Job | None, budget: PrivacyLedger | None
) -> dict[str, Any]:
    """What a deployment's answers guarantee, from what was recorded: PMixED's (ε, δ) and
    SubMix's Rényi ε from its reservation on the dataset's ``budget`` (never its settings),
    a DP adapter's from its training statement (a JFT adapter's SDP)."""
    req = stored_request(row)
    m = mechanism(req.mechanism)
    statement = adapter_statement(job) if job is not None and m.serves == "adapter" else {}
    cfg = request_config(req, statement)
    found = reserved(budget, cfg, row.id) if budget is not None else None
    recorded = {**statement, "reserved": found} if found is not None else statement
    return m.guarantee(cfg, recorded).to_dict()


def adapter_statement(job: Job) -> dict[str, Any]:
    """What a served adapter's ``privacy.json`` states (its facts only)."""
    path = Path(job.output_dir) / "privacy.json"
    if not job.output_dir or not path.is_file():
        return {}
    statement = json.loads(path.read_text())
    return {k: statement[k] for k in STATEMENT_FACTS if k in statement}


def members_of(job: Job) -> int:
    """How many members a job's ensemble has (1 for an adapter)."""
    from privlm.training.manifest import load_manifest

    return load_manifest(job.output_dir).members if serves(job) != "adapter" else 1


def reserve_on_dataset(ledger: PrivacyLedger, req: Any, job: Job, dep_id: str) -> None:
    """Charge the deployment's whole cost to its dataset's budget, durably, or refuse
    (:class:`BudgetExceededError`, recording nothing) if it does not fit
    (:func:`privlm.predict.factory.reserve`: SubMix's per-part figure beside the per-unit
    one, never composed with it)."""
    reserve(ledger, request_config(req), members_of(job), dep_id, {"job": job.id})


def create_ledgers(row: Deployment, job: Job, ledger_url: str) -> None:
    """Open the deployment's budget in the ledger at creation, so it is durable (and
    visible) before the first token."""
    req = stored_request(row)
    m = mechanism(req.mechanism)
    if m.open_ledgers is not None:
        m.open_ledgers(ledger_url, deployment_ledger(row.id), request_config(req), members_of(job))


def check_deployable(job: Job, mechanism_name: str) -> None:
    """Refuse a deployment of a job that has not succeeded, or with a mechanism that does
    not serve what the job made (from the job kind's and the mechanism's records)."""
    if job.status != "succeeded":
        raise PrivlmError(f"job {job.id} has not succeeded (status {job.status})")
    target = serves(job)
    if target is None:
        raise PrivlmError(f"a {job.kind} job has no model to deploy")
    fitting = [m.name for m in serving(target)]
    if mechanism_name not in fitting:
        what = "one DP adapter" if target == "adapter" else f"a {target} ensemble"
        raise PrivlmError(
            f"job {job.id} trained {what}; deploy it with mechanism {' or '.join(fitting)}"
        )
