"""API keys are revoked (API and CLI) and expire: a revoked or expired key stops working at
once, on every route, and a tenant cannot touch another tenant's keys."""

from __future__ import annotations

from datetime import timedelta

from typer.testing import CliRunner

from privlm.cli import app as cli
from privlm.service.db import ApiKey, make_engine, now, session_factory
from privlm.service.keys import add_key


def test_a_tenant_lists_and_revokes_its_own_key_and_it_stops_working(service):
    acme = service.auth("acme")
    listed = service.client.get("/v1/keys", headers=acme).json()["data"]
    assert [k["state"] for k in listed] == ["active"]
    prefix = listed[0]["prefix"]
    assert service.keys["acme"].startswith(prefix) and "key_hash" not in listed[0]
    other = service.client.delete(f"/v1/keys/{prefix}", headers=service.auth("globex"))
    assert other.status_code == 404  # not globex's key
    r = service.client.delete(f"/v1/keys/{prefix}", headers=acme)
    assert r.status_code == 200 and r.json()["state"] == "revoked"
    for path in ("/v1/datasets", "/v1/jobs", "/v1/keys"):
        assert service.client.get(path, headers=acme).status_code == 401
    assert service.client.get("/v1/datasets", headers=service.auth("globex")).status_code == 200


def test_an_expired_key_is_refused(service):
    sessions = session_factory(make_engine(service.settings.db_url))
    with sessions.begin() as s:
        tenant = s.query(ApiKey).first().tenant_id
        key = add_key(s, tenant, expires_in_days=1)
    headers = {"Authorization": f"Bearer {key}"}
    assert service.client.get("/v1/datasets", headers=headers).status_code == 200
    with sessions.begin() as s:
        row = s.query(ApiKey).filter(ApiKey.prefix == key[:12]).one()
        row.expires_at = now() - timedelta(seconds=1)
    assert service.client.get("/v1/datasets", headers=headers).status_code == 401
    states = {k["prefix"]: k["state"] for k in service.client.get(
        "/v1/keys", headers=service.auth("acme")).json()["data"]}  # fmt: skip
    assert states.get(key[:12]) in (None, "expired")


def test_the_cli_adds_lists_and_revokes_keys(tmp_path):
    runner = CliRunner()
    base = ["service", "--help"]
    assert runner.invoke(cli, base).exit_code == 0
    where = ["--data-dir", str(tmp_path)]
    made = runner.invoke(cli, ["service", "tenant-create", "acme", *where, "--json"])
    assert made.exit_code == 0, made.output
    added = runner.invoke(cli, ["service", "keys", "add", "acme", "--expires-days", "30", *where])
    assert added.exit_code == 0 and "shown once" in added.output
    listed = runner.invoke(cli, ["service", "keys", "list", "acme", *where, "--json"])
    import json

    keys = json.loads(listed.output)["keys"]
    assert len(keys) == 2 and keys[1]["expires_at"] is not None
    gone = runner.invoke(cli, ["service", "keys", "revoke", "acme", keys[0]["prefix"], *where])
    assert gone.exit_code == 0 and "revoked" in gone.output
    again = json.loads(runner.invoke(cli, ["service", "key-list", "acme", *where, "--json"]).output)
    assert [k["state"] for k in again["keys"]] == ["revoked", "active"]
    bad = runner.invoke(cli, ["service", "keys", "revoke", "acme", "plm_nosuchkey", *where])
    assert bad.exit_code != 0 and "no API key" in bad.output


def test_a_retried_submission_with_an_idempotency_key_creates_one_job(service):
    """A client whose connection dropped retries the same POST: the same key and request get
    the first answer and no second job; the same key with another request is a 422."""
    acme = {**service.auth("acme"), "Idempotency-Key": "submit-7f3a"}
    ds = service.upload("acme", budget_epsilon=8).json()["id"]
    body = {"kind": "ensemble", "dataset_id": ds, "params": {"parts": 2}}
    first = service.client.post("/v1/jobs", headers=acme, json=body)
    again = service.client.post("/v1/jobs", headers=acme, json=body)
    assert first.status_code == again.status_code == 201, again.text
    assert again.json()["id"] == first.json()["id"]
    jobs = service.client.get("/v1/jobs", headers=service.auth("acme")).json()["data"]
    assert len(jobs) == 1
    other = service.client.post("/v1/jobs", headers=acme, json={**body, "params": {"parts": 3}})
    assert other.status_code == 422 and "another request" in other.json()["error"]["message"]
    theirs = {**service.auth("globex"), "Idempotency-Key": "submit-7f3a"}  # keys are per tenant
    assert service.client.post("/v1/jobs", headers=theirs, json=body).status_code == 404
    plain = service.client.post("/v1/jobs", headers=service.auth("acme"), json=body)
    assert plain.status_code == 201 and plain.json()["id"] != first.json()["id"]


def test_a_retried_deployment_with_an_idempotency_key_reserves_its_budget_once(
    service, ensemble_job
):
    from privlm.accounting import PrivacyLedger

    headers = {**service.auth("acme"), "Idempotency-Key": "dep-1"}
    body = {"job_id": ensemble_job["id"], "mechanism": "pmixed", "epsilon": 8, "queries": 8}
    first = service.client.post("/v1/deployments", headers=headers, json=body)
    again = service.client.post("/v1/deployments", headers=headers, json=body)
    assert first.status_code == again.status_code == 201, again.text
    assert first.json()["id"] == again.json()["id"]
    ledger = PrivacyLedger(service.ledgers, f"dataset-{ensemble_job['dataset_id']}")
    assert [c.params.get("deployment") for c in ledger.charges()] == [first.json()["id"]]


def test_an_admin_key_manages_every_tenants_keys_over_http(service):
    admin, c = service.admin(), service.client
    tenants = c.get("/v1/admin/tenants", headers=admin).json()["data"]
    assert [(t["name"], t["active_keys"]) for t in tenants] == [("acme", 1), ("globex", 1)]
    made = c.post("/v1/admin/tenants", headers=admin, json={"name": "initech"})
    assert made.status_code == 201, made.text
    initech = {"Authorization": f"Bearer {made.json()['api_key']}"}
    assert c.get("/v1/datasets", headers=initech).status_code == 200
    assert c.post("/v1/admin/tenants", headers=admin, json={"name": "acme"}).status_code == 409
    new = c.post("/v1/admin/tenants/acme/keys", headers=admin, json={"expires_in_days": 30})
    assert new.status_code == 201 and new.json()["key"]["expires_at"] is not None
    listed = c.get("/v1/admin/tenants/acme/keys", headers=admin).json()["data"]
    assert len(listed) == 2 and all("key_hash" not in k and "api_key" not in k for k in listed)
    first = listed[0]["prefix"]
    gone = c.delete(f"/v1/admin/tenants/acme/keys/{first}", headers=admin)
    assert gone.status_code == 200 and gone.json()["state"] == "revoked"
    assert c.get("/v1/datasets", headers=service.auth("acme")).status_code == 401
    fresh = {"Authorization": f"Bearer {new.json()['api_key']}"}
    assert c.get("/v1/datasets", headers=fresh).status_code == 200
    # a prefix is looked up within the tenant named: globex's key is not acme's
    globex_prefix = service.keys["globex"][:12]
    assert (
        c.delete(f"/v1/admin/tenants/acme/keys/{globex_prefix}", headers=admin).status_code == 404
    )
    assert c.get("/v1/admin/tenants/nobody/keys", headers=admin).status_code == 404


def test_the_admin_routes_take_only_an_admin_key_and_it_reads_no_tenants_data(service):
    admin, c = service.admin(), service.client
    for headers in ({}, service.auth("globex"), {"Authorization": "Bearer plm_admin_forged"}):
        r = c.get("/v1/admin/tenants", headers=headers)
        assert r.status_code == 401, (headers, r.text)
    for path in ("/v1/datasets", "/v1/jobs", "/v1/deployments", "/v1/keys"):
        assert c.get(path, headers=admin).status_code == 401  # not a tenant
    key = admin["Authorization"].split()[1]
    assert c.get(f"/v1/admin/tenants?key={key}").status_code == 400  # never in a URL
    bad = c.post("/v1/admin/tenants/acme/keys", headers=admin, json={"expires_in_days": "3"})
    assert bad.status_code == 400 and "expires_in_days" in bad.text
    with session_factory(make_engine(service.settings.db_url)).begin() as s:
        from privlm.service.keys import revoke_admin_key

        revoke_admin_key(s, key)
    assert c.get("/v1/admin/tenants", headers=admin).status_code == 401


def test_the_cli_adds_lists_and_revokes_admin_keys(tmp_path):
    import json

    runner, where = CliRunner(), ["--data-dir", str(tmp_path)]
    added = runner.invoke(cli, ["service", "admin-keys", "add", *where])
    assert added.exit_code == 0 and "shown once" in added.output, added.output
    key = added.output.split()[-1]
    listed = json.loads(
        runner.invoke(cli, ["service", "admin-keys", "list", *where, "--json"]).output
    )
    assert [k["state"] for k in listed["admin_keys"]] == ["active"]
    assert key.startswith(listed["admin_keys"][0]["prefix"]) and key not in str(listed)
    gone = runner.invoke(cli, ["service", "admin-keys", "revoke", key[:16], *where])
    assert gone.exit_code == 0 and "revoked" in gone.output
    bad = runner.invoke(cli, ["service", "admin-keys", "revoke", "plm_admin_none", *where])
    assert bad.exit_code == 2 and "no admin key" in bad.output
