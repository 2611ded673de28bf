"""``/v1/jobs``: submit (parameters validated into their kind's typed config, the planned ε
checked against what is left of the dataset's budget), list, describe, cancel, and the
released artefact of a DP job."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Body
from fastapi.responses import Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from privlm.accounting.ledger import PrivacyLedger
from privlm.data import Record
from privlm.service.api_errors import ApiError
from privlm.service.auth import Db, Me
from privlm.service.db import Dataset, Job, new_id, now
from privlm.service.idempotency import KeyHeader, once
from privlm.service.job_kinds import StoredParams, checked_params, job_kind, stored_params
from privlm.service.job_params import (
    PateParams,
    SynthParams,
    TaskParams,
    check_dataset_policy,
    check_pate_plan,
    check_synth_labels,
    check_task_data,
)
from privlm.service.job_queue import positions
from privlm.service.job_runners import add_event
from privlm.service.job_views import describe, zip_artifact
from privlm.service.protocol import (
    ERRORS,
    CuratorReport,
    DatasetView,
    ErrorAnswer,
    SaveAsDataset,
    job_list,
    job_request,
    job_view,
)
from privlm.service.record_index import (
    describe_lines,
    describe_sharing,
    find_matches,
    fingerprint,
    sketcher_for,
)
from privlm.service.state import State, own


def assembled() -> APIRouter:
    """``/v1/jobs``, its request and answers unions over the job kinds registered now
    (:mod:`privlm.service.protocol`); the app assembles it (privlm.service.app)."""
    r = APIRouter(prefix="/v1/jobs")
    Request, View = job_request(), job_view()

    def submit(body: Any, s: Db, me: Me, state: State, key: KeyHeader = None) -> Any:
        return once(s, me.id, key, "jobs", body, lambda: submit_job(body, s, me, state))

    # the union itself, not a string: this module's annotations are postponed
    submit.__annotations__["body"] = Annotated[Request, Body()]
    r.add_api_route("", submit, methods=["POST"], status_code=201, response_model=View,
                    responses=ERRORS, summary="Submit a job")  # fmt: skip
    r.add_api_route("", list_jobs, methods=["GET"], response_model=job_list(), responses=ERRORS)
    r.add_api_route("/{job_id}", get_job, methods=["GET"], response_model=View, responses=ERRORS)
    r.add_api_route("/{job_id}/cancel", cancel_job, methods=["POST"], response_model=View,
                    responses=ERRORS)  # fmt: skip
    r.add_api_route(
        "/{job_id}/artifact", artifact, methods=["GET"], response_class=Response,
        responses={200: {"content": {"application/zip": {}},
                         "description": "The artefact and its privacy statement, zipped"},
                   403: {"model": ErrorAnswer, "description": "This kind releases nothing"},
                   410: {"model": ErrorAnswer, "description": "Deleted with its dataset"},
                   **ERRORS},
    )  # fmt: skip
    r.add_api_route(
        "/{job_id}/curator-report", curator_report, methods=["GET"],
        response_model=CuratorReport, responses=ERRORS,
        summary="A finished job's statistics of its data, for the data's owner (not DP)",
    )  # fmt: skip
    r.add_api_route(
        "/{job_id}/dataset", save_as_dataset, methods=["POST"], status_code=201,
        response_model=DatasetView, response_model_exclude_unset=True,
        responses={403: {"model": ErrorAnswer, "description": "This kind has no DP result"},
                   410: {"model": ErrorAnswer, "description": "Deleted with its dataset"},
                   **ERRORS},
        summary="Save a finished job's DP result as a public dataset",
    )  # fmt: skip
    return r


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


def check_never_private(s: Session, tenant_id: str, inputs: list[Record], secret: bytes) -> None:
    """Refuse PromptPATE public inputs that are records of any private dataset the tenant
    ever uploaded (deleted ones included): they would leave verbatim in the student prompt.
    The refusal gives the count, never the text."""
    sketcher = sketcher_for(secret, tenant_id)
    prints = fingerprint(inputs, sketcher.key, "pate-inputs", sketcher)
    matches = find_matches(s, tenant_id, prints)
    owners = matches.owners()
    if owners:
        shared, near = matches.records(), matches.near_count()
        raise ApiError(
            400, "invalid_request",
            f"refused: {len(shared)} of the {len(inputs)} public inputs"
            f"{f' ({near} of them near copies)' if near else ''} are records of the tenant's "
            f"private data ({describe_sharing(s, owners)}; public dataset "
            f"{describe_lines(prints, shared)}). PromptPATE releases "
            "its public inputs verbatim in the student prompt, so the public data must hold "
            "no private record, even of a deleted dataset",
        )  # fmt: skip


def submit_job(req: Any, s: Db, me: Me, state: State) -> dict[str, Any]:
    """``req``: one variant of the job request union, its parameters typed by its kind."""
    dataset = own(s, Dataset, req.dataset_id, me, "dataset")
    params = checked_params(req.params)
    check_dataset_policy(req.kind, dataset)
    if isinstance(params, TaskParams):
        public = None
        if isinstance(params, PateParams):
            public = own(s, Dataset, params.public_dataset_id, me, "dataset")
        inputs = check_task_data(params, dataset, public, state.settings.model)
        if inputs is not None:
            check_never_private(s, me.id, inputs, state.record_secret)
        if isinstance(params, PateParams) and inputs is not None:
            check_pate_plan(params, state.dataset_ledger(dataset), dataset, len(inputs))
    if isinstance(params, SynthParams):
        check_synth_labels(params, dataset)
    planned = params.planned_epsilon
    if planned is not None:
        check_fits_remaining(planned, state.dataset_ledger(dataset))
    queued = [{"at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "what": "queued"}]
    job = Job(
        id=new_id("job"), tenant_id=me.id, kind=req.kind, dataset_id=req.dataset_id,
        params=StoredParams(params, state.settings.model).to_json(), status="queued",
        epsilon_planned=planned, events=json.dumps(queued),
    )  # fmt: skip
    s.add(job)
    s.flush()
    return describe(job, positions(s).get(job.id))


def list_jobs(s: Db, me: Me) -> dict[str, Any]:
    rows = s.scalars(select(Job).where(Job.tenant_id == me.id).order_by(Job.created_at))
    line = positions(s)
    return {"data": [describe(r, line.get(r.id)) for r in rows]}


def get_job(job_id: str, s: Db, me: Me) -> dict[str, Any]:
    return describe(own(s, Job, job_id, me, "job"), positions(s).get(job_id))


def cancel_job(job_id: str, s: Db, me: Me) -> dict[str, Any]:
    """A queued job is dropped; a running one stops at its next step, writes no artefact,
    and keeps any charge already made."""
    job = own(s, Job, job_id, me, "job")
    if job.status == "queued":
        job.status, job.finished_at = "cancelled", now()
        job.epsilon_spent = None if job.kind == "ensemble" else 0.0
        add_event(job, "cancelled before it started: nothing was charged")
    elif job.status == "running":
        if not job.cancel_requested:
            job.cancel_requested = True
            add_event(job, "cancel requested: it stops at its next step")
    else:
        raise ApiError(409, "conflict", f"job {job.id} has already {job.status}")
    s.flush()
    return describe(job)


def artifact(job_id: str, s: Db, me: Me, state: State) -> Response:
    """The released artefact of a DP job as a zip: the adapter or student prompt with its
    privacy statement. An ensemble's adapters are not DP (each saw its part of the data in
    the clear; only the mixing is private) and are never released."""
    job = own(s, Job, job_id, me, "job")
    kind = job_kind(job.kind)
    if kind.releases is None:
        raise ApiError(
            403, "forbidden",
            f"job {job.id} ({job.kind}) releases no artefact: "
            f"{kind.guarantee(stored_params(job).params)['text']}",
        )  # fmt: skip
    if job.status != "succeeded":
        raise ApiError(409, "conflict", f"job {job.id} has not succeeded (status {job.status})")
    if not job.output_dir:
        raise ApiError(410, "gone", f"job {job.id}'s artefact was deleted with its dataset")
    model = stored_params(job).model or state.settings.model
    blob = zip_artifact(Path(job.output_dir), model, state.settings.data_dir)
    return Response(
        blob, media_type="application/zip",
        headers={"Content-Disposition": f'attachment; filename="{job.id}.zip"'},
    )  # fmt: skip


def curator_report(job_id: str, s: Db, me: Me) -> dict[str, Any]:
    """What the worker kept beside a finished job's folder for its tenant (exact counts,
    and a synth job's overlap report): never inside the folder the artefact zips."""
    from privlm.curator import CURATOR_NOTE

    job = own(s, Job, job_id, me, "job")
    if job.status != "succeeded":
        raise ApiError(409, "conflict", f"job {job.id} has not succeeded (status {job.status})")
    kept = Path(job.output_dir).parent / "result.json" if job.output_dir else None
    if kept is None or not kept.is_file():
        raise ApiError(410, "gone", f"job {job.id}'s report was deleted with its dataset")
    curator = json.loads(kept.read_text()).get("not_private_for_the_curator", {})
    return {"job_id": job.id, "note": CURATOR_NOTE, "not_private_for_the_curator": curator}


def save_as_dataset(
    job_id: str, body: SaveAsDataset, s: Db, me: Me, state: State
) -> dict[str, Any]:
    """A finished synth job's texts as a public dataset of the tenant: they are DP, so any
    job may use them without a budget (e.g. as PromptPATE's public inputs)."""
    from privlm.service import datasets as ds_api

    job = own(s, Job, job_id, me, "job")
    result = job_kind(job.kind).public_result
    if result is None:
        raise ApiError(
            403, "forbidden", f"job {job.id} ({job.kind}) has no DP result to save as a dataset"
        )
    if job.status != "succeeded":
        raise ApiError(409, "conflict", f"job {job.id} has not succeeded (status {job.status})")
    if not job.output_dir or not (Path(job.output_dir) / result).is_file():
        raise ApiError(410, "gone", f"job {job.id}'s result was deleted with its dataset")
    row = ds_api.store_release(
        s, state.settings.data_dir, me.id, Path(job.output_dir) / result,
        body.name or f"synthetic texts of {job.id}",
    )  # fmt: skip
    add_event(job, f"saved as public dataset {row.id}")
    return ds_api.describe(row, None)
