"""``/v1/datasets``: upload (the browser perturbs first), list, describe, delete."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, UploadFile
from fastapi.concurrency import run_in_threadpool
from sqlalchemy import select
from sqlalchemy.orm import Session

from privlm.service import datasets as ds_api
from privlm.service.api_errors import ApiError
from privlm.service.auth import Db, Me, MeBriefly
from privlm.service.db import Dataset, Deployment, Job, now
from privlm.service.job_runners import add_event
from privlm.service.protocol import (
    ERRORS,
    DatasetDeleted,
    DatasetList,
    DatasetView,
    UploadedDataset,
)
from privlm.service.state import ServiceState, State, own
from privlm.service.strict import FormError, form_object

router = APIRouter(prefix="/v1/datasets")
# a dataset's answer leaves out what it does not have (a shared budget, a note): unset


@router.post(
    "",
    status_code=201,
    response_model=UploadedDataset,
    responses=ERRORS,
    response_model_exclude_unset=True,
)
async def upload(
    me: MeBriefly,
    state: State,
    file: Annotated[UploadFile, File()],
    budget_epsilon: Annotated[float | None, Form()] = None,
    budget_delta: Annotated[float | None, Form()] = None,
    perturbation: Annotated[str | None, Form(max_length=10_000)] = None,
    name: Annotated[str | None, Form(max_length=200)] = None,
    require_dp: Annotated[bool, Form()] = False,
    fields: Annotated[str | None, Form(max_length=500)] = None,
    public: Annotated[bool, Form()] = False,
) -> dict[str, Any]:
    """Every form field is checked before anything is written; the file is then written,
    parsed and digested in a worker thread with no database transaction open, and stored
    in a short transaction of its own: a large upload never holds the event loop or the
    database's write lock while it is read."""
    try:
        meta = form_object(perturbation, "perturbation")
        budget = upload_budget(budget_epsilon, budget_delta)
        keep = ds_api.parse_fields(fields)
        if name is not None:
            form_object(json.dumps({"name": name}), "name")  # no NUL or lone surrogate
        prepared = await run_in_threadpool(
            ds_api.prepare_upload, state.settings.data_dir, me.id,
            file.filename or "upload.txt", file.file, state.record_secret, name, keep,
        )  # fmt: skip
        stored = await run_in_threadpool(
            store_prepared, state, prepared, (budget, budget_epsilon is None), meta,
            require_dp, public,
        )  # fmt: skip
    except FormError as exc:
        raise ApiError(400, "invalid_request", str(exc)) from None
    except ds_api.UploadError as exc:
        raise ApiError(400, "invalid_dataset", str(exc)) from None
    return stored


def upload_budget(epsilon: float | None, delta: float | None) -> ds_api.DatasetBudget | None:
    """The budget the form asks for (None: the default, or the joined budget's)."""
    if epsilon is None and delta is None:
        return None
    default = ds_api.DEFAULT_BUDGET
    return ds_api.check_budget(
        default.epsilon if epsilon is None else epsilon,
        default.delta if delta is None else delta,
    )


def store_prepared(
    state: ServiceState,
    prepared: ds_api.PreparedUpload,
    asked: tuple[ds_api.DatasetBudget | None, bool],
    meta: dict[str, Any] | None,
    require_dp: bool,
    public: bool,
) -> dict[str, Any]:
    """The upload's row, index and answer, in one short transaction (a worker thread);
    the file moves into place once the row is committed. ``asked``: the budget the form
    gave, and whether it gave no ε."""
    budget, no_epsilon = asked
    try:
        with state.sessions.begin() as s:
            stored = ds_api.commit_upload(s, prepared, budget, meta, require_dp, public)
            out = ds_api.describe(stored.row, state.budget_ledger(stored.row))
            note = budget_note(stored, out["budget"], budget, no_epsilon)
    except BaseException:
        prepared.discard()
        raise
    ds_api.place_upload(prepared)
    return {**out, "budget_note": note} if note else out


def budget_note(
    stored: ds_api.Stored,
    budget: dict[str, Any] | None,
    asked: ds_api.DatasetBudget | None,
    no_epsilon: bool,
) -> str | None:
    """What the upload's answer says about its budget: joined, or the default ε it got."""
    if stored.joined is not None and budget is not None:
        j = stored.joined
        gone = " (deleted: its budget stays)" if j.deleted_at is not None else ""
        ignored = (
            f"; the budget you asked for (ε {asked.epsilon:g}) does not apply: one body of "
            "records has one budget"
            if asked is not None
            and (asked.epsilon, asked.delta) != (j.budget_epsilon, j.budget_delta)
            else ""
        )
        return (
            f"shares {stored.shared} of its {stored.row.records} records"
            f"{f' ({stored.near} of them near copies)' if stored.near else ''} with dataset "
            f"{j.budget_id or j.id}{gone} ({stored.where}), so it joins that budget: ε "
            f"{budget['remaining']['epsilon']:.4g} of {budget['epsilon']:g} left at δ "
            f"{budget['delta']:g}{ignored}"
        )
    if no_epsilon and budget is not None:
        return (
            f"no budget ε was given: the default, ε {budget['epsilon']:g} at δ "
            f"{budget['delta']:g}, applies"
        )
    return None


@router.get("", response_model=DatasetList, responses=ERRORS, response_model_exclude_unset=True)
def list_datasets(s: Db, me: Me, state: State) -> dict[str, Any]:
    rows = s.scalars(
        select(Dataset)
        .where(Dataset.tenant_id == me.id, Dataset.deleted_at.is_(None))
        .order_by(Dataset.created_at)
    )
    return {"data": [ds_api.describe(r, state.budget_ledger(r)) for r in rows]}


@router.get(
    "/{dataset_id}", response_model=DatasetView, responses=ERRORS, response_model_exclude_unset=True
)
def get_dataset(dataset_id: str, s: Db, me: Me, state: State) -> dict[str, Any]:
    row = own(s, Dataset, dataset_id, me, "dataset")
    return ds_api.describe(row, state.budget_ledger(row))


@router.delete("/{dataset_id}", response_model=DatasetDeleted, responses=ERRORS)
def delete_dataset(
    dataset_id: str, s: Db, me: Me, state: State, cascade: bool = False
) -> dict[str, Any]:
    """Delete the dataset's file and text. Its ledger and record digests stay (a tombstone):
    spent budget is history, and an upload of the same records joins the same budget.
    Refused while jobs or deployments depend on it, unless ``cascade``: then its queued jobs
    are cancelled, its deployments stop and its jobs' artefacts are deleted (never while
    one of its jobs is running: cancel that first)."""
    row = own(s, Dataset, dataset_id, me, "dataset")
    jobs = list(s.scalars(select(Job).where(Job.dataset_id == row.id)))
    running = [j.id for j in jobs if j.status == "running"]
    if running:
        raise ApiError(
            409, "conflict",
            f"job {running[0]} is running on this dataset: cancel it first (it stops at its "
            "next step), then delete",
        )  # fmt: skip
    deployments = list(
        s.scalars(select(Deployment).where(Deployment.job_id.in_([j.id for j in jobs])))
    )
    dependent = [
        j for j in jobs if j.status == "queued" or (j.status == "succeeded" and j.output_dir)
    ]
    if (dependent or deployments) and not cascade:
        raise ApiError(
            409, "conflict",
            f"{len(deployments)} deployment(s) and {len(dependent)} job(s) depend on this "
            "dataset (" + ", ".join([d.id for d in deployments] + [j.id for j in dependent])
            + "); delete with ?cascade=true to stop its deployments, cancel its queued jobs "
            "and delete their artefacts. Its budget stays either way",
        )  # fmt: skip
    out = {"id": dataset_id, "deleted": True, **_cascade(s, state, jobs, deployments)}
    ds_api.delete_dataset(s, row)
    ledger = state.budget_ledger(row)
    out["budget"] = (
        None if ledger is None
        else f"kept: ledger {ledger.name} (ε {ledger.spent().epsilon:.4g} of "
        f"{ledger.budget.epsilon:g} spent); an upload of these records joins it"
    )  # fmt: skip
    return out


def _cascade(
    s: Session, state: ServiceState, jobs: list[Job], deployments: list[Deployment]
) -> dict[str, list[str]]:
    """Stop the deployments, cancel the queued jobs, delete the finished jobs' artefacts."""
    for d in deployments:
        state.runtime.stop(d.id)
        s.delete(d)
    cancelled, removed = [], []
    for j in jobs:
        if j.status == "queued":
            j.status, j.finished_at = "cancelled", now()
            add_event(j, "cancelled: its dataset was deleted (nothing was charged)")
            cancelled.append(j.id)
        elif j.output_dir:
            shutil.rmtree(Path(j.output_dir).parent, ignore_errors=True)
            j.output_dir = ""
            add_event(j, "artefact deleted with its dataset (its charges stay)")
            removed.append(j.id)
    s.flush()
    return {
        "stopped_deployments": [d.id for d in deployments],
        "cancelled_jobs": cancelled,
        "deleted_artefacts": removed,
    }
