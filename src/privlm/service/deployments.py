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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, model_validator

from privlm.accounting import Charge, PrivacyLedger, RdpCurve
from privlm.accounting.analysis import pmixed as pmixed_analysis
from privlm.accounting.analysis.pmixed import REPLACEMENT
from privlm.config import request_field
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.models.pool import ModelPool
from privlm.predict.config import (
    MixtureConfig,
    PlainConfig,
    PMixEDConfig,
    PredictorConfig,
    ScreenedPMixEDConfig,
    SubMixConfig,
    mechanism_config,
)
from privlm.predict.factory import build_predictor
from privlm.predict.loading import LoadedEnsemble, load_adapter, load_ensemble
from privlm.predict.pmixed import UNIT as PMIXED_UNIT
from privlm.predict.pmixed import PMixED, shortfall
from privlm.predict.protocol import Predictor
from privlm.service.admission import SchedulerLimits, TenantGate
from privlm.service.db import Deployment, Job
from privlm.service.job_params import EnsembleParams, stored_params
from privlm.service.job_views import guarantee
from privlm.service.scheduler import DeploymentScheduler
from privlm.service.strict import STRICT_BODY

LEGACY_BOUND = "jensen"  # what deployments stored without a bound were reserved with
RESTATEMENT = "deployment-reservation-restatement"


# the settings each mechanism reads; any other one given is refused (400)
APPLIES = {
    "pmixed": {"epsilon", "delta", "queries", "alpha", "sample_rate", "bound", "fallback"},
    "screened": {
        "epsilon", "delta", "alpha", "sample_rate", "paid_tokens", "threshold", "svt_share",
        "fallback",
    },
    "submix": {"epsilon", "delta", "queries", "alpha", "beta", "fallback"},
    "adapter": set(),
}  # fmt: skip


class DeploymentParams(BaseModel):
    """A deployment's settings; defaults, bounds and help come from PMixEDConfig,
    ScreenedPMixEDConfig and SubMixConfig (ε and α: the mechanism's own when not given).
    ``screened``: PMixED behind a sparse-vector screen, on a PMixED ensemble; once its c
    paid tokens are spent it refuses, or answers from the public model with ``fallback``."""

    model_config = STRICT_BODY
    job_id: str = Field(..., max_length=40)
    mechanism: str = Field("pmixed", pattern="^(pmixed|screened|submix|adapter)$")
    epsilon: float | None = Field(
        None, gt=0, le=1000,
        description="PMixED: ε_G at δ (default 8); SubMix: RDP ε per part at order α (default 2)",
    )  # fmt: skip
    delta: float = request_field(PMixEDConfig, "delta")
    queries: int = request_field(PMixEDConfig, "queries")
    alpha: float | None = Field(
        None, gt=1, le=256, description="Rényi order α (default: PMixED 3, an integer; SubMix 2)"
    )
    sample_rate: float = request_field(PMixEDConfig, "sample_rate")
    bound: str = request_field(PMixEDConfig, "bound")
    beta: float | None = Field(None, gt=0, le=1000, description="SubMix per-query β (default ε/T)")
    paid_tokens: int = request_field(ScreenedPMixEDConfig, "paid_tokens")
    threshold: float = request_field(ScreenedPMixEDConfig, "threshold")
    svt_share: float = request_field(ScreenedPMixEDConfig, "svt_share")
    fallback: bool = Field(False, description="answer from the public model once spent")

    @model_validator(mode="after")
    def _only_what_applies(self) -> DeploymentParams:
        given = self.model_fields_set - {"job_id", "mechanism"}
        wrong = sorted(given - APPLIES[self.mechanism])
        if wrong:
            raise ValueError(
                f"{', '.join(wrong)}: not a setting of a {self.mechanism} deployment (it takes "
                f"{', '.join(sorted(APPLIES[self.mechanism])) or 'none'})"
            )
        return self

    @classmethod
    def from_row(cls, row: Deployment) -> DeploymentParams:
        """A stored deployment's settings, read back: those of its mechanism only (rows
        stored before every setting was checked against its mechanism hold them all). Every
        PMixED deployment answers under the per-unit bound, whatever it was stored with."""
        raw = json.loads(row.params)
        mechanism = raw.get("mechanism", "pmixed")
        kept = {k: v for k, v in raw.items() if k in {"job_id", "mechanism", *APPLIES[mechanism]}}
        if "bound" in kept:
            kept["bound"] = REPLACEMENT
        return cls(**kept)

    def stored(self) -> dict[str, Any]:
        """The settings as stored with the deployment: those of its mechanism only."""
        return self.model_dump(include={"job_id", "mechanism", *APPLIES[self.mechanism]})

    def mixture(self) -> MixtureConfig:
        """The private mixture's config (PMixED's for an adapter deployment, whose budget
        columns have always held PMixED's defaults; its tokens charge nothing)."""
        method = self.mechanism if self.mechanism in ("submix", "screened") else "pmixed"
        return mechanism_config(
            method, epsilon=self.epsilon, delta=self.delta, alpha=self.alpha,
            queries=self.queries, sample_rate=self.sample_rate, beta=self.beta, bound=self.bound,
            screen={"paid_tokens": self.paid_tokens, "threshold": self.threshold,
                    "svt_share": self.svt_share, "when_spent": "refuse"},
        )  # fmt: skip

    def config(self, statement: dict[str, Any] | None = None) -> PredictorConfig:
        """The typed config the factory builds this deployment's predictor from: the request
        is parsed here, once; nothing after it branches on the mechanism's name."""
        if self.mechanism == "adapter":
            return PlainConfig("adapter", statement=statement or {})
        return self.mixture()

    def resolved(self) -> DeploymentParams:
        """The same settings with ε and α filled in from the mechanism's defaults."""
        cfg = self.mixture()
        return self.model_copy(update={"epsilon": cfg.epsilon, "alpha": cfg.alpha})


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
    params = DeploymentParams.from_row(row)
    loaded, statement = _served(job, models)
    predictor = build_predictor(
        params.config(statement), loaded, ledger=ledger_url, name=f"deployment-{row.id}"
    )
    if isinstance(predictor, PMixED) and deployment_bound(raw) != REPLACEMENT:
        restate_reservation(ledger_url, job, row, predictor, budget)
    public = build_predictor(PlainConfig("public"), loaded)
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
    if job.kind == "ensemble":
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
    reserved = [
        r for r in records
        if r.mechanism == "deployment-reservation" and r.params.get("deployment") == row.id
    ]  # fmt: skip
    grid = dataset.orders
    released = predictor.ledger.recorded_rdp(predictor.ledger.charges(), grid)
    left = predictor.queries_left() if predictor.refusal is None else 0
    lifetime = released + left * predictor.query_curve.at(grid) if left else released
    charge = Charge(
        RESTATEMENT,
        rdp=RdpCurve.from_arrays(grid, shortfall(lifetime, dataset.recorded_rdp(reserved, grid))),
        unit=PMIXED_UNIT,
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


def deployment_guarantee(row: Deployment, job: Job | None) -> dict[str, Any]:
    """What a deployment's answers guarantee: PMixED in (ε, δ), SubMix
    in Rényi DP at its order, a DP adapter's training ε, or a JFT adapter's SDP."""
    p = DeploymentParams.from_row(row)
    if row.mechanism == "pmixed":
        return {"kind": "DP", "relation": pmixed_analysis.relation(REPLACEMENT),
                "text": f"({row.budget_epsilon:g}, {row.budget_delta:g})-DP over all its "
                "private tokens, per unit of the dataset (adding or removing one unit "
                "replaces one ensemble member's model)"}  # fmt: skip
    if row.mechanism == "screened":
        return {"kind": "DP", "relation": pmixed_analysis.relation(REPLACEMENT),
                "text": f"({row.budget_epsilon:g}, {row.budget_delta:g})-DP over its "
                f"{p.paid_tokens} paid tokens and any number of free ones (a sparse-vector "
                "screen sends each query to the public model or to a paid PMixED query), per "
                "unit of the dataset (adding or removing one unit replaces one ensemble "
                "member's model)"}  # fmt: skip
    if row.mechanism == "submix":
        return {"kind": "RDP", "order": p.alpha, "rdp_epsilon": p.epsilon,
                "relation": "per part: one part removed (operational privacy); not per unit",
                "text": f"(α={p.alpha:g}, ε={p.epsilon:g})-Rényi operational privacy per "
                "part (a part removed), not a per-unit DP guarantee"}  # fmt: skip
    if job is not None and job.kind == "jft":
        return guarantee(job)
    return {"kind": "DP", "text": "a DP-trained adapter: its tokens are post-processing"}


def check_config(p: DeploymentParams) -> None:
    """Refuse at creation a configuration the mechanism would refuse at the first token."""
    cfg = p.config()
    if isinstance(cfg, PMixEDConfig):
        pmixed_analysis.check_per_unit(cfg.bound)


def lifetime_cost(p: DeploymentParams, job: Job) -> RdpCurve | None:
    """Everything the deployment can ever release about its dataset, as one RDP curve:
    PMixED's T queries at the radius its ensemble gets, or SubMix's (α, ε) per part. None
    for a DP adapter, whose tokens are post-processing of a release already charged.

    privlm reserves this on the dataset's ledger when the deployment is created, so every deployment of every ensemble counts against the dataset's one budget."""
    from privlm.training.manifest import load_manifest

    cfg = p.config()
    if isinstance(cfg, PMixEDConfig | ScreenedPMixEDConfig):
        return cfg.lifetime_curve(load_manifest(job.output_dir).members)
    if isinstance(cfg, SubMixConfig):
        return cfg.lifetime_curve()
    return None


def reserve_on_dataset(ledger: PrivacyLedger, p: DeploymentParams, job: Job, dep_id: str) -> None:
    """Charge the deployment's whole cost to its dataset's ledger, durably, or refuse
    (:class:`BudgetExceededError`, recording nothing) if it does not fit."""
    cost = lifetime_cost(p, job)
    if cost is None:
        return
    ledger.charge(
        Charge(
            "deployment-reservation",
            rdp=cost,
            unit=PMIXED_UNIT
            if p.mechanism in ("pmixed", "screened")
            else "part (SubMix: a part removed; not a per-unit figure)",
            params={
                "deployment": dep_id,
                "job": job.id,
                "mechanism": p.mechanism,
                "epsilon": p.epsilon,
                "delta": p.delta,
                "queries": p.queries,
                "alpha": p.alpha,
                "bound": p.bound,
                **({"paid_tokens": p.paid_tokens} if p.mechanism == "screened" else {}),
            },
        )
    )


def create_ledgers(row: Deployment, job: Job, ledger_url: str) -> None:
    """Open the deployment's budget in the ledger at creation, so it is durable (and
    visible) before the first token."""
    from privlm.accounting import Budget
    from privlm.predict.submix import part_ledgers
    from privlm.training.manifest import load_manifest

    cfg = DeploymentParams.from_row(row).config()
    name = f"deployment-{row.id}"
    if isinstance(cfg, PMixEDConfig | ScreenedPMixEDConfig):
        PrivacyLedger(ledger_url, name, Budget(cfg.epsilon, cfg.delta))
    elif isinstance(cfg, SubMixConfig):
        part_ledgers(ledger_url, name, load_manifest(job.output_dir).submix_parts, cfg)


def check_deployable(job: Job, mechanism: str) -> None:
    if job.status != "succeeded":
        raise PrivlmError(f"job {job.id} has not succeeded (status {job.status})")
    params = stored_params(job).params
    if isinstance(params, EnsembleParams):
        protocol = params.protocol
        if mechanism != protocol and not (mechanism == "screened" and protocol == "pmixed"):
            raise PrivlmError(
                f"job {job.id} trained a {protocol} ensemble; deploy it with mechanism {protocol}"
                + (" or screened" if protocol == "pmixed" else "")
            )
    elif job.kind in ("dpsgd", "jft"):
        if mechanism != "adapter":
            raise PrivlmError(f"job {job.id} trained one DP adapter; deploy it as 'adapter'")
    else:
        raise PrivlmError(f"a {job.kind} job has no model to deploy")
