"""The typed public API (privlm.service.protocol): every route in the OpenAPI schema is
called live here, and each answer validates against the schema the route documents; every
JSON answer has a documented, non-empty schema (job parameters typed by kind, never an
untyped object); an answer holding an undeclared field is refused, never sent."""

from __future__ import annotations

import pytest
from jsonschema import Draft202012Validator

from tests.service.conftest import complete, deploy, job, run_queue, submit

BINARY = {"application/zip", "application/octet-stream"}


def check(spec, method, template, response):
    """``response`` validates against what ``spec`` documents for it."""
    documented = spec["paths"][template][method]["responses"]
    status = str(response.status_code)
    assert status in documented, (method, template, status, response.text[:300])
    content = documented[status].get("content", {})
    kind = response.headers["content-type"].split(";")[0]
    if kind in BINARY:
        assert kind in content, (template, kind)
        return
    schema = content["application/json"]["schema"]
    assert schema, (method, template, "an untyped answer")
    validator = Draft202012Validator({**schema, "components": spec["components"]})
    errors = [e.message for e in validator.iter_errors(response.json())]
    assert not errors, (method, template, errors[:3])


@pytest.fixture
def called(service, ensemble_job):
    """A live call of every route; returns (spec, calls) with calls (method, template, r)."""
    spec = service.client.get("/openapi.json").json()
    c, auth = service.client, service.auth("acme")
    calls = []

    def call(method, template, path=None, headers=None, **kw):
        r = c.request(
            method.upper(), path or template, headers=auth if headers is None else headers, **kw
        )
        calls.append((method, template, r))
        return r

    ds = call("post", "/v1/datasets", files={"file": ("n.txt", b"a\nb\nc\nd", "text/plain")})
    spare = ds.json()["id"]
    data_id = ensemble_job["dataset_id"]
    call("get", "/v1/datasets")
    call("get", "/v1/datasets/{dataset_id}", f"/v1/datasets/{data_id}")
    queued = call("post", "/v1/jobs", json={"kind": "dpsgd", "dataset_id": spare,
                                            "params": {"epsilon": 1.0}}).json()  # fmt: skip
    call("post", "/v1/jobs/{job_id}/cancel", f"/v1/jobs/{queued['id']}/cancel")
    trained = submit(service, "acme", "dpsgd", data_id, epsilon=1.0, block_size=16, batch_size=8)
    synth = submit(service, "acme", "synth", data_id, epsilon=0.5, count=1, max_tokens=2,
                   members=2, prompt_tokens=8)  # fmt: skip
    run_queue(service)
    assert job(service, "acme", trained["id"])["status"] == "succeeded"
    assert job(service, "acme", synth["id"])["status"] == "succeeded"
    call("post", "/v1/jobs/{job_id}/dataset", f"/v1/jobs/{synth['id']}/dataset", json={})
    call("post", "/v1/jobs/{job_id}/dataset", f"/v1/jobs/{trained['id']}/dataset", json={})  # 403
    call("get", "/v1/jobs/{job_id}/curator-report", f"/v1/jobs/{synth['id']}/curator-report")
    call("get", "/v1/jobs")
    call("get", "/v1/jobs/{job_id}", f"/v1/jobs/{ensemble_job['id']}")
    call("get", "/v1/jobs/{job_id}/artifact", f"/v1/jobs/{trained['id']}/artifact")
    call("get", "/v1/jobs/{job_id}/artifact", f"/v1/jobs/{ensemble_job['id']}/artifact")  # 403
    call("get", "/v1/mechanisms")
    dep = call("post", "/v1/deployments", json={"job_id": ensemble_job["id"], "queries": 6,
                                                "epsilon": 6.0}).json()  # fmt: skip
    assert "id" in dep, dep
    adapter = deploy(service, "acme", trained["id"], mechanism="adapter").json()
    call("get", "/v1/deployments")
    call("get", "/v1/deployments/{deployment_id}", f"/v1/deployments/{dep['id']}")
    call("get", "/v1/models")
    r = complete(service, "acme", dep["id"])
    calls.append(("post", "/v1/completions", r))
    chat = {"model": adapter["id"], "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 3}  # fmt: skip
    call("post", "/v1/chat/completions", json=chat)
    for d in (dep["id"], adapter["id"]):  # an ensemble's budget, an adapter's
        call("get", "/v1/deployments/{deployment_id}/budget", f"/v1/deployments/{d}/budget")
    call("get", "/v1/perturb/words")
    call("get", "/v1/perturb/vectors")
    call("get", "/v1/defaults")
    call("get", "/v1/health")
    call("get", "/v1/datasets/{dataset_id}", "/v1/datasets/ds_missing")  # a documented 404
    call("delete", "/v1/datasets/{dataset_id}", f"/v1/datasets/{spare}", params={"cascade": True})
    admin = service.admin()
    call("get", "/v1/admin/tenants", headers=admin)
    call("post", "/v1/admin/tenants", json={"name": "initech"}, headers=admin)
    call("post", "/v1/admin/tenants", json={"name": "initech"}, headers=admin)  # a 409
    new = call("post", "/v1/admin/tenants/{name}/keys", "/v1/admin/tenants/initech/keys",
               json={}, headers=admin).json()  # fmt: skip
    call("get", "/v1/admin/tenants/{name}/keys", "/v1/admin/tenants/initech/keys", headers=admin)
    call("get", "/v1/admin/tenants/{name}/keys", "/v1/admin/tenants/nobody/keys", headers=admin)
    call("delete", "/v1/admin/tenants/{name}/keys/{prefix}",
         f"/v1/admin/tenants/initech/keys/{new['key']['prefix']}", headers=admin)  # fmt: skip
    call("get", "/v1/admin/tenants", headers={})  # a documented 401
    keys = call("get", "/v1/keys").json()["data"]
    call("delete", "/v1/keys/{prefix}", "/v1/keys/plm_missing")  # a documented 404
    call("delete", "/v1/keys/{prefix}", f"/v1/keys/{keys[0]['prefix']}")  # last: its own key
    return spec, calls


def test_every_route_is_called_live_and_answers_as_its_schema_says(called):
    spec, calls = called
    for method, template, r in calls:
        assert r.status_code < 500, (template, r.text)
        check(spec, method, template, r)
    documented = {(m, p) for p, ops in spec["paths"].items() for m in ops}
    assert documented == {(m, t) for m, t, _ in calls}  # a new route needs a live call here


def test_every_json_answer_and_the_job_parameters_are_typed(service):
    spec = service.client.get("/openapi.json").json()
    for path, ops in spec["paths"].items():
        for method, op in ops.items():
            ok = [v for k, v in op["responses"].items() if k.startswith("2")]
            assert ok, (method, path)
            content = ok[0].get("content", {})
            if "application/json" in content:
                assert content["application/json"]["schema"], (method, path)
    schemas = spec["components"]["schemas"]
    params = schemas["DpsgdJob"]["properties"]["params"]
    assert params == {"$ref": "#/components/schemas/DpsgdJobParams"}
    assert "epsilon" in schemas["DpsgdJobParams"]["properties"]
    request = spec["paths"]["/v1/jobs"]["post"]["requestBody"]["content"]["application/json"]
    assert len(request["schema"]["oneOf"]) >= 5  # one variant per registered job kind


def test_an_answer_with_an_undeclared_field_is_not_sent(service, monkeypatch):
    """Fail-closed: a field added to a view without its declaration in the protocol is an
    error (500), never part of an answer."""
    from fastapi.testclient import TestClient

    import privlm.service.routes.datasets as route

    ds = service.upload("acme").json()
    real = route.ds_api.describe
    monkeypatch.setattr(route.ds_api, "describe", lambda *a: {**real(*a), "records_seen": 1234})
    client = TestClient(service.client.app, raise_server_exceptions=False)
    r = client.get(f"/v1/datasets/{ds['id']}", headers=service.auth("acme"))
    assert r.status_code == 500 and "1234" not in r.text and "records_seen" not in r.text
