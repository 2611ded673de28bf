"""The HTTP API (FastAPI) and the perturbation page.

Every route below ``/v1`` except the public perturbation assets needs
``Authorization: Bearer <API key>``; every lookup is made together with the caller's tenant,
and another tenant's resource is reported exactly like a missing one (404). Errors are JSON
``{"error": {"type", "message"}}`` and never quote the request body.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from sqlalchemy import select
from sqlalchemy.orm import Session
from starlette.exceptions import HTTPException as StarletteHTTPException

from privlm.accounting.ledger import PrivacyLedger, durable_engine
from privlm.errors import BudgetExceededError, PrivlmError
from privlm.perturb.mechanisms import DEFAULT_CLIP
from privlm.perturb.vocabulary import DEFAULT_VOCABULARY, load_glove
from privlm.service import datasets as ds_api
from privlm.service import jobs as jobs_api
from privlm.service.admission import SchedulerLimits
from privlm.service.api_errors import ApiError, SafeJSONResponse, not_found
from privlm.service.auth import Db, Me, MeBriefly
from privlm.service.db import (
    Dataset,
    Deployment,
    Job,
    Tenant,
    ledger_url,
    make_engine,
    new_id,
    now,
    session_factory,
)
from privlm.service.deployments import (
    DeploymentParams,
    DeploymentRuntime,
    check_config,
    check_deployable,
    create_ledgers,
    deployment_guarantee,
    reserve_on_dataset,
)
from privlm.service.keys import tenant_for_key
from privlm.service.limits import BodySizeLimit
from privlm.service.openai_api import mount_openai
from privlm.service.strict import STRICT_BODY
from privlm.service.url_keys import AccessLog, KeyBeforeBody, KeysNotInUrls

STATIC = Path(__file__).with_name("static")
log = logging.getLogger("privlm.service")


@dataclass
class ServiceSettings:
    data_dir: Path
    db_url: str
    model: str = "smollm2-135m"
    max_body_bytes: int = 1 << 20
    max_upload_bytes: int = 20 << 20
    vocabulary: int = DEFAULT_VOCABULARY
    scheduling: SchedulerLimits = field(default_factory=SchedulerLimits)


class JobRequest(BaseModel):
    model_config = STRICT_BODY
    kind: str = Field(..., max_length=20)
    dataset_id: str = Field(..., max_length=40)
    params: dict[str, Any] = Field(default_factory=dict)


def check_fits_remaining(epsilon: float, ledger: PrivacyLedger) -> None:
    """Refuse at submission a job whose ε exceeds what is left of the dataset's budget."""
    left = ledger.remaining()
    if epsilon > left:
        raise ApiError(
            400, "invalid_request",
            f"params.epsilon: {epsilon:g} is more than what is left of the dataset's budget "
            f"(ε {left:.4g} of {ledger.budget.epsilon:g} at δ {ledger.budget.delta:g}); "
            "ask for at most that",
        )  # fmt: skip


def create_app(settings: ServiceSettings) -> FastAPI:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.db_url)
    sessions = session_factory(engine)
    ledgers = ledger_url(settings.db_url, settings.data_dir)
    ledger_engine = durable_engine(ledgers)  # one pool for the datasets' ledgers
    runtime = DeploymentRuntime(ledgers, settings.scheduling)
    app = FastAPI(
        title="privlm", version="1", docs_url="/docs", redoc_url=None,
        default_response_class=SafeJSONResponse,
    )  # fmt: skip
    app.state.settings, app.state.engine, app.state.runtime = settings, engine, runtime
    app.state.sessions = sessions

    # -- errors: JSON, and never echoing what was sent -------------------------------------------

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return SafeJSONResponse(exc.body(), exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        body = {"error": {"type": kind, "message": str(exc.detail)}}
        return SafeJSONResponse(body, exc.status_code, headers=exc.headers)

    @app.exception_handler(UnicodeError)
    async def _unencodable(_: Request, exc: UnicodeError) -> JSONResponse:
        message = "the request holds text that cannot be encoded as UTF-8 (a lone surrogate)"
        return SafeJSONResponse({"error": {"type": "invalid_request", "message": message}}, 400)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in exc.errors()
        )
        return SafeJSONResponse({"error": {"type": "invalid_request", "message": problems}}, 400)

    @app.exception_handler(PrivlmError)
    async def _privlm(_: Request, exc: PrivlmError) -> JSONResponse:
        return SafeJSONResponse({"error": {"type": "invalid_request", "message": str(exc)}}, 400)

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:
        log.error("internal error: %s", type(exc).__name__)
        return JSONResponse(
            {"error": {"type": "internal_error", "message": type(exc).__name__}}, 500
        )

    # -- plumbing ------------------------------------------------------------------------------

    def own(s: Session, model: Any, ident: str, me: Tenant, what: str) -> Any:
        row = s.scalar(select(model).where(model.id == ident, model.tenant_id == me.id))
        if row is None:
            raise not_found(what, ident)
        return row

    # -- page and public assets ------------------------------------------------------------------

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @lru_cache(maxsize=4)
    def vocabulary(clip: float) -> tuple[list[str], bytes]:
        v = load_glove(settings.vocabulary, clip)
        return list(v.words), v.vectors.astype("<f4").tobytes()

    def checked_clip(clip: float) -> float:
        if not (0 < clip <= 100):
            raise ApiError(400, "invalid_request", "clip must be in (0, 100]")
        return float(clip)

    @app.get("/v1/perturb/words")
    def perturb_words(clip: float = DEFAULT_CLIP) -> dict[str, Any]:
        words, _ = vocabulary(checked_clip(clip))
        return {"words": words, "dim": 50, "clip": clip, "source": "GloVe 6B 50d"}

    @app.get("/v1/perturb/vectors")
    def perturb_vectors(clip: float = DEFAULT_CLIP) -> Response:
        _, blob = vocabulary(checked_clip(clip))
        return Response(blob, media_type="application/octet-stream")

    @app.get("/v1/defaults")
    def defaults() -> dict[str, Any]:
        """The defaults the page's forms start from, read from the config classes (so the
        page never restates one)."""
        return {"dataset_budget": {"epsilon": ds_api.DEFAULT_BUDGET.epsilon,
                                   "delta": ds_api.DEFAULT_BUDGET.delta}}  # fmt: skip

    @app.get("/v1/health")
    @app.get("/health", include_in_schema=False)  # the path load balancers expect
    async def health() -> dict[str, Any]:
        """A coroutine on the event loop: it never waits for a thread, or for generation."""
        return {"status": "ok", "model": settings.model}

    # -- datasets ------------------------------------------------------------------------------

    def budget_ledger(row: Dataset) -> PrivacyLedger | None:
        """A private dataset's ledger; a public one has none."""
        return None if row.kind == "public" else jobs_api.dataset_ledger(ledger_engine, row)

    @app.post("/v1/datasets", status_code=201)
    async def upload(
        s: Db,
        me: Me,
        file: Annotated[UploadFile, File()],
        budget_epsilon: Annotated[float, Form()] = ds_api.DEFAULT_BUDGET.epsilon,
        budget_delta: Annotated[float, Form()] = ds_api.DEFAULT_BUDGET.delta,
        perturbation: Annotated[str | None, Form(max_length=10_000)] = None,
        name: Annotated[str | None, Form(max_length=200)] = None,
        require_dp: Annotated[bool, Form()] = False,
        fields: Annotated[str | None, Form(max_length=500)] = None,
        public: Annotated[bool, Form()] = False,
    ) -> dict[str, Any]:
        content = await file.read()
        meta = None
        if perturbation:
            try:
                meta = json.loads(perturbation)
            except json.JSONDecodeError:
                raise ApiError(400, "invalid_request", "perturbation must be JSON") from None
        try:
            row = ds_api.store_dataset(
                s, settings.data_dir, me.id, file.filename or "upload.txt", content,
                budget_epsilon, budget_delta, meta, name, require_dp,
                ds_api.parse_fields(fields), public,
            )  # fmt: skip
        except ds_api.UploadError as exc:
            raise ApiError(400, "invalid_dataset", str(exc)) from None
        return ds_api.describe(row, budget_ledger(row))

    @app.get("/v1/datasets")
    def list_datasets(s: Db, me: Me) -> dict[str, Any]:
        rows = s.scalars(
            select(Dataset).where(Dataset.tenant_id == me.id).order_by(Dataset.created_at)
        )
        return {"data": [ds_api.describe(r, budget_ledger(r)) for r in rows]}

    @app.get("/v1/datasets/{dataset_id}")
    def get_dataset(dataset_id: str, s: Db, me: Me) -> dict[str, Any]:
        row = own(s, Dataset, dataset_id, me, "dataset")
        return ds_api.describe(row, budget_ledger(row))

    @app.delete("/v1/datasets/{dataset_id}")
    def delete_dataset(dataset_id: str, s: Db, me: Me) -> dict[str, Any]:
        row = own(s, Dataset, dataset_id, me, "dataset")
        busy = s.scalar(
            select(Job).where(Job.dataset_id == row.id, Job.status.in_(("queued", "running")))
        )
        if busy is not None:
            raise ApiError(409, "conflict", f"job {busy.id} still uses this dataset")
        ds_api.delete_dataset(s, row)
        return {"id": dataset_id, "deleted": True}

    # -- jobs ----------------------------------------------------------------------------------

    @app.post("/v1/jobs", status_code=201)
    def submit_job(req: JobRequest, s: Db, me: Me) -> dict[str, Any]:
        dataset = own(s, Dataset, req.dataset_id, me, "dataset")
        params = jobs_api.validate_params(req.kind, req.params)
        jobs_api.check_dataset_policy(req.kind, dataset)
        if req.kind in jobs_api.TASK_KINDS:
            public = None
            if req.kind == "pate":
                public = own(s, Dataset, params["public_dataset_id"], me, "dataset")
            jobs_api.check_task_data(params, dataset, public)
        params["model"] = settings.model
        planned = params.get("epsilon") if req.kind in ("dpsgd", "jft", "prompt-dpsgd") else None
        if planned is not None:
            check_fits_remaining(planned, jobs_api.dataset_ledger(ledger_engine, dataset))
        job = Job(
            id=new_id("job"), tenant_id=me.id, kind=req.kind, dataset_id=req.dataset_id,
            params=json.dumps(params), status="queued", epsilon_planned=planned,
            events=json.dumps([{"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "what": "queued"}]),
        )  # fmt: skip
        s.add(job)
        s.flush()
        return jobs_api.describe(job)

    @app.get("/v1/jobs")
    def list_jobs(s: Db, me: Me) -> dict[str, Any]:
        rows = s.scalars(select(Job).where(Job.tenant_id == me.id).order_by(Job.created_at))
        return {"data": [jobs_api.describe(r) for r in rows]}

    @app.get("/v1/jobs/{job_id}")
    def get_job(job_id: str, s: Db, me: Me) -> dict[str, Any]:
        return jobs_api.describe(own(s, Job, job_id, me, "job"))

    @app.post("/v1/jobs/{job_id}/cancel")
    def cancel_job(job_id: str, s: Db, me: Me) -> dict[str, Any]:
        """A queued job is dropped; a running one stops at its next step, writes no
        artefact, and keeps any charge already made."""
        job = own(s, Job, job_id, me, "job")
        if job.status == "queued":
            job.status, job.finished_at = "cancelled", now()
            job.epsilon_spent = None if job.kind == "ensemble" else 0.0
            jobs_api.add_event(job, "cancelled before it started: nothing was charged")
        elif job.status == "running":
            if not job.cancel_requested:
                job.cancel_requested = True
                jobs_api.add_event(job, "cancel requested: it stops at its next step")
        else:
            raise ApiError(409, "conflict", f"job {job.id} has already {job.status}")
        s.flush()
        return jobs_api.describe(job)

    @app.get("/v1/jobs/{job_id}/artifact")
    def artifact(job_id: str, s: Db, me: Me) -> Response:
        """The released artefact of a DP job as a zip: the adapter or student prompt with its
        privacy statement. An ensemble's adapters are not DP (each saw its part of the data
        in the clear; only the mixing is private) and are never released."""
        job = own(s, Job, job_id, me, "job")
        if job.kind not in jobs_api.RELEASABLE:
            raise ApiError(
                403, "forbidden",
                f"job {job.id} trained an ensemble: its adapters are not differentially "
                "private, and are served only through a PMixED or SubMix deployment",
            )  # fmt: skip
        if job.status != "succeeded":
            raise ApiError(409, "conflict", f"job {job.id} has not succeeded (status {job.status})")
        model = json.loads(job.params).get("model") or settings.model
        blob = jobs_api.zip_artifact(Path(job.output_dir), model, settings.data_dir)
        return Response(
            blob, media_type="application/zip",
            headers={"Content-Disposition": f'attachment; filename="{job.id}.zip"'},
        )  # fmt: skip

    # -- deployments -----------------------------------------------------------------------------

    def describe_deployment(d: Deployment, s: Session) -> dict[str, Any]:
        job = s.get(Job, d.job_id)
        return {
            "id": d.id, "job_id": d.job_id, "mechanism": d.mechanism,
            "params": json.loads(d.params), "fallback": d.fallback,
            "budget": {"epsilon": d.budget_epsilon, "delta": d.budget_delta},
            "guarantee": deployment_guarantee(d, job),
            "created_at": d.created_at.isoformat() + "Z",
        }  # fmt: skip

    @app.post("/v1/deployments", status_code=201)
    def deploy(req: DeploymentParams, s: Db, me: Me) -> dict[str, Any]:
        req = req.resolved()
        job = own(s, Job, req.job_id, me, "job")
        check_deployable(job, req.mechanism)
        check_config(req)
        d = Deployment(
            id=new_id("dep"), tenant_id=me.id, job_id=job.id, mechanism=req.mechanism,
            params=json.dumps(req.model_dump()), budget_epsilon=req.epsilon,
            budget_delta=req.delta, fallback=req.fallback,
        )  # fmt: skip
        dataset = s.get(Dataset, job.dataset_id)
        if dataset is None and req.mechanism != "adapter":
            raise ApiError(
                409, "conflict", f"the dataset of job {job.id} was deleted, and its budget with it"
            )
        if dataset is not None:  # fail-closed: reserved, durably, before the deployment exists
            try:
                reserve_on_dataset(jobs_api.dataset_ledger(ledger_engine, dataset), req, job, d.id)
            except BudgetExceededError as exc:
                raise ApiError(
                    409, "budget_exceeded",
                    f"refused: this deployment can release up to ε={req.epsilon:g} at "
                    f"δ={req.delta:g} about dataset {dataset.id}, and that does not fit what is "
                    f"left of the dataset's budget. {exc}",
                ) from None  # fmt: skip
        create_ledgers(d, job, ledgers)
        s.add(d)
        s.flush()
        return describe_deployment(d, s)

    @app.get("/v1/deployments")
    def list_deployments(s: Db, me: Me) -> dict[str, Any]:
        rows = s.scalars(select(Deployment).where(Deployment.tenant_id == me.id))
        return {"data": [describe_deployment(d, s) for d in rows]}

    @app.get("/v1/models")
    def list_models(s: Db, me: Me) -> dict[str, Any]:
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
                        "guarantee": deployment_guarantee(d, s.get(Job, d.job_id)),
                    },
                }
                for d in rows
            ],
        }

    @app.get("/v1/deployments/{deployment_id}")
    def get_deployment(deployment_id: str, s: Db, me: Me) -> dict[str, Any]:
        return describe_deployment(own(s, Deployment, deployment_id, me, "deployment"), s)

    def loaded(me: Tenant, deployment_id: str) -> Any:
        """The loaded deployment; the rows are read in a transaction closed before loading
        (which opens the deployment's ledger)."""
        with sessions.begin() as s:
            d = own(s, Deployment, deployment_id, me, "deployment")
            job = s.get(Job, d.job_id)
            if job is None:
                raise ApiError(409, "conflict", "the deployment's job is gone")
        return runtime.get(d, job)

    @app.get("/v1/deployments/{deployment_id}/budget")
    def budget(deployment_id: str, me: MeBriefly) -> dict[str, Any]:
        dep = loaded(me, deployment_id)
        out: dict[str, Any] = dep.budget()
        return out

    mount_openai(app, loaded)

    limited = BodySizeLimit(
        app, settings.max_body_bytes, settings.max_upload_bytes, ("/v1/datasets",)
    )

    def known(key: str) -> bool:
        with sessions.begin() as s:
            return tenant_for_key(s, key) is not None

    gated = KeyBeforeBody(limited, known, ("/v1/datasets",))
    wrapped = AccessLog(KeysNotInUrls(gated))
    app.state.asgi = wrapped
    return app


def asgi_app(settings: ServiceSettings) -> Any:
    """The FastAPI app wrapped in the body-size limit, the key-in-URL guard and privlm's
    access log: what uvicorn serves."""
    return create_app(settings).state.asgi
