"""Each router of the service on an app of its own: it needs only the shared state on
``app.state.service`` (and the error handlers), not the rest of the service."""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select

from privlm.service.app import ServiceSettings, routers, service_state
from privlm.service.db import Dataset, Job, Tenant, database_url, new_id
from privlm.service.errors_http import install_error_handlers
from privlm.service.job_kinds import stored_params
from privlm.service.job_params import DpSgdParams
from privlm.service.routes import jobs, page
from privlm.training.config import DpSgdConfig
from tests.service.conftest import make_tenants


def alone(router, tmp_path) -> tuple[TestClient, object]:
    settings = ServiceSettings(
        data_dir=tmp_path / "svc", db_url=database_url(None, tmp_path), model="tiny",
        vocabulary=2000,
    )  # fmt: skip
    app = FastAPI()
    state = service_state(settings)
    app.state.service, app.state.sessions = state, state.sessions  # what auth reads
    install_error_handlers(app)
    app.include_router(router)
    return TestClient(app), state


@pytest.mark.fast
def test_the_app_is_an_assembly_of_routers():
    assert {r.prefix for r in routers()} == {
        "", "/v1/datasets", "/v1/jobs", "/v1", "/v1/keys", "/v1/admin"
    }  # fmt: skip


def test_the_page_router_alone(tmp_path):
    client, _ = alone(page.router, tmp_path)
    assert client.get("/health").json()["model"] == "tiny"
    assert client.get("/v1/defaults").json()["dataset_budget"]["epsilon"] > 0
    words = client.get("/v1/perturb/words").json()
    assert len(words["words"]) == 2000 and words["dim"] == 50
    assert client.get("/v1/perturb/words", params={"clip": 0}).status_code == 400


@pytest.fixture
def jobs_alone(tmp_path):
    client, state = alone(jobs.assembled(), tmp_path)
    key = make_tenants(state.settings.db_url, "acme")["acme"]
    with state.sessions.begin() as s:
        tenant_id = s.scalars(select(Tenant.id)).one()
        ds = Dataset(
            id=new_id("ds"), tenant_id=tenant_id, name="notes", format="txt", records=3,
            bytes=30, path=str(tmp_path / "n.txt"), budget_epsilon=8.0, budget_delta=1e-6,
        )  # fmt: skip
        s.add(ds)
        ds_id = ds.id
    return client, state, {"Authorization": f"Bearer {key}"}, ds_id


def test_the_jobs_router_alone_stores_typed_parameters(jobs_alone):
    client, state, auth, ds_id = jobs_alone
    r = client.post("/v1/jobs", headers=auth,
                    json={"kind": "dpsgd", "dataset_id": ds_id, "params": {"epsilon": 2.0}})  # fmt: skip
    assert r.status_code == 201, r.text
    with state.sessions.begin() as s:
        job = s.get(Job, r.json()["id"])
        stored = stored_params(job)
    assert isinstance(stored.params, DpSgdParams) and stored.model == "tiny"
    assert stored.params.config(1e-6) == DpSgdConfig(target_epsilon=2.0, delta=1e-6)
    too_much = client.post("/v1/jobs", headers=auth,
                           json={"kind": "dpsgd", "dataset_id": ds_id, "params": {"epsilon": 9.0}})  # fmt: skip
    assert too_much.status_code == 400 and "left of the dataset's budget" in too_much.text
    unknown = client.post("/v1/jobs", headers=auth,
                          json={"kind": "nope", "dataset_id": ds_id, "params": {}})  # fmt: skip
    assert unknown.status_code == 400 and "unknown job kind" in unknown.text
    assert client.get("/v1/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert json.loads(client.get("/v1/jobs", headers=auth).text)["data"][0]["kind"] == "dpsgd"


def test_the_admin_router_alone(tmp_path):
    from privlm.service.keys import add_admin_key
    from privlm.service.routes import admin

    client, state = alone(admin.router, tmp_path)
    make_tenants(state.settings.db_url, "acme")
    with state.sessions.begin() as s:
        key = add_admin_key(s)
    r = client.get("/v1/admin/tenants", headers={"Authorization": f"Bearer {key}"})
    assert [t["name"] for t in r.json()["data"]] == ["acme"]
