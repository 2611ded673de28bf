"""The service on PostgreSQL (``--db postgresql://…``): the same API, jobs and per-token
charging, with the ledgers in the same database under row locks."""

from __future__ import annotations

import threading

from fastapi.testclient import TestClient

from privlm.accounting import PrivacyLedger
from privlm.service.app import ServiceSettings, create_app
from privlm.service.worker import Worker
from tests.service.conftest import TEXT, Service, make_tenants


def test_service_on_postgres(pg, tmp_path):
    settings = ServiceSettings(data_dir=tmp_path / "svc", db_url=pg.url, model="tiny")
    app = create_app(settings)
    svc = Service(TestClient(app.state.asgi), settings, make_tenants(pg.url, "acme", "globex"))
    assert svc.ledgers == pg.url  # one database holds service rows and ledgers
    ds = svc.upload("acme", TEXT).json()
    assert svc.client.get(f"/v1/datasets/{ds['id']}", headers=svc.auth("globex")).status_code == 404
    r = svc.client.post(
        "/v1/jobs",
        headers=svc.auth("acme"),
        json={"kind": "ensemble", "dataset_id": ds["id"], "params": {"parts": 2, "block_size": 16, "max_blocks": 2}},
    )  # fmt: skip
    job = r.json()["id"]
    Worker(pg.url, settings.data_dir, "tiny").loop(once=True)
    assert (
        svc.client.get(f"/v1/jobs/{job}", headers=svc.auth("acme")).json()["status"] == "succeeded"
    )
    dep = svc.client.post(
        "/v1/deployments", headers=svc.auth("acme"),
        json={"job_id": job, "mechanism": "pmixed", "epsilon": 8, "queries": 12},
    ).json()["id"]  # fmt: skip
    returned, lock = [], threading.Lock()

    def client() -> None:
        for _ in range(5):
            r = svc.client.post(
                "/v1/completions", headers=svc.auth("acme"),
                json={"model": dep, "prompt": "x", "max_tokens": 2},
            )  # fmt: skip
            if r.status_code == 429:
                return
            with lock:
                returned.append(r.json()["usage"]["completion_tokens"])

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    led = PrivacyLedger(pg.url, f"deployment-{dep}")
    assert led.count() == sum(returned) == 12 and led.verify()
    assert led.spent().epsilon <= 8


def test_record_index_units_and_idempotency_on_postgres(pg, tmp_path):
    """The record index's canonical digests, near-copy sketches (bytea), bands and units,
    and Idempotency-Key, on PostgreSQL as on SQLite."""
    from tests.service.test_record_forms import PLAIN, SENTENCES, USERS, _by_user

    url = pg.database("record_index")
    settings = ServiceSettings(data_dir=tmp_path / "svc", db_url=url, model="tiny")
    app = create_app(settings)
    svc = Service(TestClient(app.state.asgi), settings, make_tenants(url, "pgidx"))
    first = svc.upload("pgidx", PLAIN).json()
    lower = svc.upload("pgidx", PLAIN.lower()).json()
    assert lower["budget_of"] == first["id"]
    near = svc.upload("pgidx", "\n".join(f"Fwd: {s.replace('the', 'teh', 1)}" for s in SENTENCES))
    assert near.json()["budget_of"] == first["id"] and "near copies" in near.json()["budget_note"]
    users = svc.upload("pgidx", _by_user(USERS), "users.jsonl")  # per-user copy: joins
    assert users.json()["budget_of"] == first["id"], users.text
    acme = {**svc.auth("pgidx"), "Idempotency-Key": "pg-submit-1"}
    body = {"kind": "ensemble", "dataset_id": first["id"], "params": {"parts": 2}}
    a = svc.client.post("/v1/jobs", headers=acme, json=body)
    b = svc.client.post("/v1/jobs", headers=acme, json=body)
    assert a.status_code == b.status_code == 201 and a.json()["id"] == b.json()["id"]
    jobs = svc.client.get("/v1/jobs", headers=svc.auth("pgidx")).json()["data"]
    assert len(jobs) == 1
