"""``/v1/datasets``: upload (the browser perturbs first), list, describe, delete."""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, UploadFile
from sqlalchemy import select

from privlm.service import datasets as ds_api
from privlm.service.api_errors import ApiError
from privlm.service.auth import Db, Me
from privlm.service.db import Dataset, Job
from privlm.service.state import State, own

router = APIRouter(prefix="/v1/datasets")


@router.post("", status_code=201)
async def upload(
    s: Db,
    me: Me,
    state: State,
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
            s, state.settings.data_dir, me.id, file.filename or "upload.txt", content,
            budget_epsilon, budget_delta, meta, name, require_dp,
            ds_api.parse_fields(fields), public,
        )  # fmt: skip
    except ds_api.UploadError as exc:
        raise ApiError(400, "invalid_dataset", str(exc)) from None
    return ds_api.describe(row, state.budget_ledger(row))


@router.get("")
def list_datasets(s: Db, me: Me, state: State) -> dict[str, Any]:
    rows = s.scalars(select(Dataset).where(Dataset.tenant_id == me.id).order_by(Dataset.created_at))
    return {"data": [ds_api.describe(r, state.budget_ledger(r)) for r in rows]}


@router.get("/{dataset_id}")
def get_dataset(dataset_id: str, s: Db, me: Me, state: State) -> dict[str, Any]:
    row = own(s, Dataset, dataset_id, me, "dataset")
    return ds_api.describe(row, state.budget_ledger(row))


@router.delete("/{dataset_id}")
def delete_dataset(dataset_id: str, s: Db, me: Me) -> dict[str, Any]:
    row = own(s, Dataset, dataset_id, me, "dataset")
    busy = s.scalar(
        select(Job).where(Job.dataset_id == row.id, Job.status.in_(("queued", "running")))
    )
    if busy is not None:
        raise ApiError(409, "conflict", f"job {busy.id} still uses this dataset")
    ds_api.delete_dataset(s, row)
    return {"id": dataset_id, "deleted": True}
