"""``/v1/deployments`` and ``/v1/models``: a trained job served privately (its whole cost
reserved on its dataset's budget before it exists), what its answers guarantee, and its
budget."""

import json
from typing import Annotated, Any

from fastapi import APIRouter, Body
from sqlalchemy import select
from sqlalchemy.orm import Session

from privlm.errors import BudgetExceededError, PrivlmError
from privlm.predict.mechanisms import Mechanism, mechanisms
from privlm.service.api_errors import ApiError
from privlm.service.auth import Db, Me, MeBriefly
from privlm.service.db import Dataset, Deployment, Job, Tenant, new_id
from privlm.service.deployments import (
    LoadedDeployment,
    check_deployable,
    create_ledgers,
    deployment_guarantee,
    deployment_request,
    request_config,
    reserve_on_dataset,
)
from privlm.service.idempotency import KeyHeader, once
from privlm.service.protocol import (
    ERRORS,
    DeploymentBudget,
    DeploymentList,
    DeploymentView,
    MechanismList,
    ModelList,
)
from privlm.service.state import ServiceState, State, own

router = APIRouter(prefix="/v1")


def describe_deployment(d: Deployment, s: Session, state: ServiceState) -> dict[str, Any]:
    job = s.get(Job, d.job_id)
    return {
        "id": d.id, "job_id": d.job_id, "mechanism": d.mechanism,
        "params": json.loads(d.params), "fallback": d.fallback,
        "budget": {"epsilon": d.budget_epsilon, "delta": d.budget_delta},
        "guarantee": guarantee_from_budget(d, job, s, state),
        "created_at": d.created_at.isoformat() + "Z",
    }  # fmt: skip


def assembled() -> APIRouter:
    """This module's routes, and ``POST /v1/deployments`` with its body the union of every
    mechanism registered now (the app assembles it: privlm.service.app)."""
    r = APIRouter()
    deploy_route(r)
    r.include_router(router)
    return r


def deploy_route(r: APIRouter) -> None:
    """``POST /v1/deployments``, its body the union of every mechanism registered now."""
    Request = deployment_request()

    @r.post("/v1/deployments", status_code=201, response_model=DeploymentView, responses=ERRORS)
    def deploy(
        body: Annotated[Request, Body()],  # type: ignore[valid-type]
        s: Db,
        me: Me,
        state: State,
        key: KeyHeader = None,
    ) -> dict[str, Any]:
        return once(
            s, me.id, key, "deployments", body, lambda: create_deployment(body, s, me, state)
        )


def create_deployment(body: Any, s: Session, me: Tenant, state: ServiceState) -> dict[str, Any]:
    """A deployment of a finished job, its budget reserved durably before it exists."""
    req: Any = body  # one variant of the union: its mechanism's settings
    job = own(s, Job, req.job_id, me, "job")
    check_deployable(job, req.mechanism)
    cfg = request_config(req)  # refused now, not at the first token
    epsilon, delta = getattr(cfg, "epsilon", 0.0), getattr(cfg, "delta", 0.0)
    d = Deployment(
        id=new_id("dep"), tenant_id=me.id, job_id=job.id, mechanism=req.mechanism,
        params=json.dumps(req.model_dump()), budget_epsilon=epsilon, budget_delta=delta,
        fallback=getattr(req, "fallback", False),
    )  # fmt: skip
    dataset = s.get(Dataset, job.dataset_id)
    gone = dataset is None or dataset.deleted_at is not None
    if not job.output_dir or (gone and req.mechanism != "adapter"):
        raise ApiError(
            409, "conflict",
            f"the dataset of job {job.id} was deleted, and the job's models with it (its "
            "budget stays, spent as it was)",
        )  # fmt: skip
    if dataset is not None:  # fail-closed: reserved, durably, before it exists
        try:
            reserve_on_dataset(state.dataset_ledger(dataset), req, job, d.id)
        except BudgetExceededError as exc:
            raise ApiError(
                409, "budget_exceeded",
                f"refused: this deployment can release up to ε={epsilon:g} at "
                f"δ={delta:g} about dataset {dataset.id}, and that does not fit what is "
                f"left of the dataset's budget. {exc}",
            ) from None  # fmt: skip
    create_ledgers(d, job, state.ledgers)
    s.add(d)
    s.flush()
    return describe_deployment(d, s, state)


def guarantee_from_budget(
    d: Deployment, job: Job | None, s: Session, state: ServiceState
) -> dict[str, Any]:
    """The deployment's guarantee from what its dataset's budget recorded for it."""
    dataset = s.get(Dataset, job.dataset_id) if job is not None else None
    return deployment_guarantee(d, job, state.dataset_ledger(dataset) if dataset else None)


@router.get("/mechanisms", response_model=MechanismList)
def list_mechanisms() -> dict[str, Any]:
    """Every registered mechanism a deployment can use, with the fields its request takes
    (name, type, default, bounds, choices, help): what the page's deploy form shows."""
    return {"data": [describe_mechanism(m) for m in mechanisms()]}


def describe_mechanism(m: Mechanism) -> dict[str, Any]:
    fields = []
    for name, setting in m.settings().items():
        if name in m.withheld:
            continue
        fields.append({
            "name": name, "type": type(setting.default).__name__,
            "default": None if name in m.derived else setting.default,
            "bounds": setting.bounds, "choices": served_choices(m, name, setting.choices),
            "help": m.derived.get(name, setting.help),
        })  # fmt: skip
    return {
        "name": m.name, "summary": m.summary, "serves": m.serves,
        "charges_tokens": m.charges_tokens, "relation": m.relation.describe(),
        "fields": fields, "withheld": dict(m.withheld),
    }  # fmt: skip


def served_choices(m: Mechanism, name: str, choices: Any) -> list[str] | None:
    """The choices of setting ``name`` a deployment can be created with: those its
    mechanism's ``servable`` check refuses (PMixED's per-part bounds, for plans only) are
    not offered."""
    if not choices or m.servable is None:
        return list(choices) if choices else None
    kept = []
    for choice in choices:
        try:
            m.servable(m.make_config({name: choice}))
        except PrivlmError:
            continue
        kept.append(choice)
    return kept


@router.get("/deployments", response_model=DeploymentList, responses=ERRORS)
def list_deployments(s: Db, me: Me, state: State) -> dict[str, Any]:
    rows = s.scalars(select(Deployment).where(Deployment.tenant_id == me.id))
    return {"data": [describe_deployment(d, s, state) for d in rows]}


@router.get("/models", response_model=ModelList, responses=ERRORS)
def list_models(s: Db, me: Me, state: State) -> dict[str, Any]:
    """The tenant's deployments as OpenAI models, each with what its answers guarantee."""
    rows = s.scalars(select(Deployment).where(Deployment.tenant_id == me.id))
    return {
        "object": "list",
        "data": [
            {
                "id": d.id,
                "object": "model",
                "created": int(d.created_at.timestamp()),
                "owned_by": me.name,
                "privlm": {
                    "mechanism": d.mechanism,
                    "guarantee": guarantee_from_budget(d, s.get(Job, d.job_id), s, state),
                },
            }
            for d in rows
        ],
    }


@router.get("/deployments/{deployment_id}", response_model=DeploymentView, responses=ERRORS)
def get_deployment(deployment_id: str, s: Db, me: Me, state: State) -> dict[str, Any]:
    return describe_deployment(own(s, Deployment, deployment_id, me, "deployment"), s, state)


def loaded_deployment(state: ServiceState, me: Tenant, deployment_id: str) -> LoadedDeployment:
    """The caller's loaded deployment; the rows are read in a transaction closed before
    loading (which opens the deployment's ledger)."""
    with state.sessions.begin() as s:
        d = own(s, Deployment, deployment_id, me, "deployment")
        job = s.get(Job, d.job_id)
        if job is None:
            raise ApiError(409, "conflict", "the deployment's job is gone")
        dataset = s.get(Dataset, job.dataset_id)
    return state.runtime.get(d, job, None if dataset is None else dataset.ledger_name)


@router.get(
    "/deployments/{deployment_id}/budget", response_model=DeploymentBudget,
    response_model_exclude_none=True, responses=ERRORS,
)  # fmt: skip
def budget(deployment_id: str, me: MeBriefly, state: State) -> dict[str, Any]:
    out: dict[str, Any] = loaded_deployment(state, me, deployment_id).budget()
    return out
