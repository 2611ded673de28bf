"""The HTTP API: keys, tenant isolation, datasets, validation, size limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlalchemy import select

from privlm.service.db import ApiKey, make_engine, session_factory


def test_keys_are_stored_hashed(service):
    with session_factory(make_engine(service.settings.db_url)).begin() as s:
        stored = [k.key_hash for k in s.scalars(select(ApiKey))]
    for key in service.keys.values():
        assert key not in stored and all(key not in h for h in stored)
    db = Path(service.settings.db_url.removeprefix("sqlite:///")).read_bytes()
    assert not any(k.encode() in db for k in service.keys.values())


def test_requests_without_a_valid_key_are_refused(service):
    assert service.client.get("/v1/datasets").status_code == 401
    r = service.client.get("/v1/datasets", headers={"Authorization": "Bearer plm_nope"})
    assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"


def test_the_budget_defaults_come_from_one_definition(service):
    """The upload form's default budget and what the page reads from /v1/defaults are both
    DatasetBudget's; a budget outside its bounds is refused with the setting named."""
    from privlm.service.datasets import DatasetBudget

    defaults = service.client.get("/v1/defaults").json()["dataset_budget"]
    assert defaults == {"epsilon": DatasetBudget().epsilon, "delta": DatasetBudget().delta}
    ds = service.upload("acme").json()
    assert (ds["budget"]["epsilon"], ds["budget"]["delta"]) == (
        defaults["epsilon"],
        defaults["delta"],
    )
    bad = service.upload("acme", text="other text\n", budget_delta=1.5)
    assert bad.status_code == 400 and "budget_delta must be less than 1" in bad.text
    page = (Path(__file__).parents[2] / "src/privlm/service/static/index.html").read_text()
    assert 'id="budget-epsilon" type="number" min="0"' in page  # no value restated there


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ('text,user_id\n"an unterminated note,u1\nsecond,u2\n', "line 2: malformed CSV"),
        ("text,user_id\na,u1\nb\n", "line 3: 1 field, fewer than the 2 columns"),
        ("text,user_id\na,u1,extra\n", "line 2: 3 fields, more than the 2 columns"),
        ("text,user_id\na\x00b,u1\n", "line 2: a NUL byte"),
    ],
)
def test_a_malformed_csv_is_refused_with_its_line_and_nothing_is_stored(service, content, why):
    r = service.upload("acme", text=content, filename="notes.csv")
    assert r.status_code == 400 and why in r.json()["error"]["message"], r.text
    assert not list((service.settings.data_dir / "tenants").rglob("*.csv"))
    assert service.client.get("/v1/datasets", headers=service.auth("acme")).json()["data"] == []


def test_health_answers_at_both_paths_without_a_key(service):
    for path in ("/v1/health", "/health"):
        r = service.client.get(path)
        assert r.status_code == 200 and r.json()["status"] == "ok", path


def test_upload_list_get_delete(service):
    r = service.upload("acme", budget_epsilon=4, budget_delta=1e-6)
    assert r.status_code == 201, r.text
    ds = r.json()
    assert ds["records"] == 40
    assert (ds["budget"]["epsilon"], ds["budget"]["delta"]) == (4.0, 1e-6)
    assert ds["budget"]["remaining"] == {"epsilon": 4.0} and ds["budget"]["charges"] == []
    listed = service.client.get("/v1/datasets", headers=service.auth("acme")).json()["data"]
    assert [d["id"] for d in listed] == [ds["id"]]
    stored = list((service.settings.data_dir / "tenants").rglob(f"{ds['id']}.txt"))
    assert len(stored) == 1 and stored[0].is_file()
    r = service.client.delete(f"/v1/datasets/{ds['id']}", headers=service.auth("acme"))
    assert r.status_code == 200 and not stored[0].exists()
    r = service.client.get(f"/v1/datasets/{ds['id']}", headers=service.auth("acme"))
    assert r.status_code == 404


def test_tenants_never_see_each_other(service):
    ds = service.upload("acme").json()
    other = service.auth("globex")
    assert service.client.get("/v1/datasets", headers=other).json()["data"] == []
    for method, path in [
        ("get", f"/v1/datasets/{ds['id']}"),
        ("delete", f"/v1/datasets/{ds['id']}"),
    ]:
        r = getattr(service.client, method)(path, headers=other)
        assert r.status_code == 404, (method, path)
    r = service.client.post(
        "/v1/jobs", headers=other, json={"kind": "dpsgd", "dataset_id": ds["id"]}
    )
    assert r.status_code == 404  # cannot train on it either
    mine = service.client.post(
        "/v1/jobs", headers=service.auth("acme"), json={"kind": "dpsgd", "dataset_id": ds["id"]}
    ).json()
    assert service.client.get("/v1/jobs", headers=other).json()["data"] == []
    assert service.client.get(f"/v1/jobs/{mine['id']}", headers=other).status_code == 404
    r = service.client.post("/v1/deployments", headers=other, json={"job_id": mine["id"]})
    assert r.status_code == 404
    # the owner still has it
    assert (
        service.client.get(f"/v1/datasets/{ds['id']}", headers=service.auth("acme")).status_code
        == 200
    )


def test_malformed_uploads_are_explained_without_their_content(service):
    secret = "SSN 123-45-6789"
    cases = {
        "bad.jsonl": (f'{{"text": "{secret}"}}\n{{"text": "{secret}" oops\n', "line 2"),
        "bad.csv": (f"label\n{secret}\n", "no 'text' column"),
        "bad.pdf": (secret, "unsupported file type"),
        "empty.txt": ("\n\n", "no records"),
    }
    for name, (content, expect) in cases.items():
        r = service.upload("acme", content, filename=name)
        assert r.status_code == 400, name
        msg = r.json()["error"]["message"]
        assert expect in msg and secret not in msg and "123-45" not in r.text, (name, msg)
    r = service.client.post(
        "/v1/datasets",
        headers=service.auth("acme"),
        files={"file": ("x.txt", b"caf\xe9 " + secret.encode(), "text/plain")},
    )
    assert r.status_code == 400 and "UTF-8" in r.text and secret not in r.text


def test_invalid_budgets_and_params(service):
    for form in ({"budget_epsilon": -1}, {"budget_delta": 1.5}, {"budget_epsilon": "inf"}):
        r = service.upload("acme", **form)
        assert r.status_code == 400, form
    ds = service.upload("acme").json()
    bad = [
        {"kind": "dpsgd", "dataset_id": ds["id"], "params": {"epsilon": -3}},
        {"kind": "dpsgd", "dataset_id": ds["id"], "params": {"epsilonn": 3}},
        {"kind": "mining", "dataset_id": ds["id"]},
        {"kind": "ensemble", "dataset_id": ds["id"], "params": {"protocol": "magic"}},
    ]
    for body in bad:
        r = service.client.post("/v1/jobs", headers=service.auth("acme"), json=body)
        assert r.status_code == 400, body
        assert r.json()["error"]["message"]
    r = service.client.post("/v1/jobs", headers=service.auth("acme"), json={"kind": "dpsgd"})
    assert r.status_code == 400 and "dataset_id" in r.json()["error"]["message"]


def test_unknown_ids_are_404(service):
    h = service.auth("acme")
    for path in ["/v1/jobs/job_0", "/v1/datasets/ds_0", "/v1/deployments/dep_0/budget"]:
        assert service.client.get(path, headers=h).status_code == 404
    r = service.client.post("/v1/completions", headers=h, json={"model": "dep_0", "prompt": "hi"})
    assert r.status_code == 404


def test_oversized_bodies_are_refused(service):
    big = "word " * (300 << 10)  # over the 256 KiB upload limit
    r = service.upload("acme", big)
    assert r.status_code == 413 and "limit" in r.json()["error"]["message"]
    r = service.client.post(
        "/v1/jobs",
        headers={**service.auth("acme"), "content-type": "application/json"},
        content=json.dumps({"kind": "dpsgd", "dataset_id": "x", "params": {"p": "x" * (70 << 10)}}),
    )
    assert r.status_code == 413

    def chunks():  # no Content-Length: counted as it streams
        for _ in range(100):
            yield b"x" * 4096

    r = service.client.post(
        "/v1/jobs",
        headers={**service.auth("acme"), "content-type": "application/json"},
        content=chunks(),
    )
    assert r.status_code == 413


def test_validation_errors_do_not_echo_the_body(service):
    secret = "Jane Roe, MRN 88213"
    r = service.client.post(
        "/v1/jobs", headers=service.auth("acme"), json={"kind": 5, "dataset_id": secret}
    )
    assert r.status_code == 400 and secret not in r.text


def test_a_busy_database_answers_503_with_retry_after_and_the_service_recovers(
    service, monkeypatch
):
    """The pool's checkout timing out (every connection held by other requests) or SQLite's
    lock held past its busy timeout is the service's load: 503 with Retry-After, as for
    generation. Any other database failure stays a 500. Once the database answers again,
    so does the service, and the budget is untouched."""
    from sqlalchemy.exc import OperationalError
    from sqlalchemy.exc import TimeoutError as PoolTimeoutError

    ds = service.upload("acme", budget_epsilon=4).json()
    pool = service.state.engine.pool
    failures = {
        503: [
            PoolTimeoutError("QueuePool limit of size 5 overflow 10 reached, timeout 30.00"),
            OperationalError("BEGIN IMMEDIATE", {}, Exception("database is locked")),
        ],
        500: [OperationalError("SELECT 1", {}, Exception("disk I/O error"))],
    }
    for status, errors in failures.items():
        for error in errors:

            def fail(error=error):
                raise error

            with monkeypatch.context() as m:
                m.setattr(pool, "connect", fail)
                r = service.client.get(f"/v1/datasets/{ds['id']}", headers=service.auth("acme"))
            assert r.status_code == status, r.text
            if status == 503:
                assert r.json()["error"]["type"] == "overloaded"
                assert r.headers["Retry-After"] == "5" and "busy" in r.json()["error"]["message"]
            assert "QueuePool" not in r.text and "disk I/O" not in r.text
    r = service.client.get(f"/v1/datasets/{ds['id']}", headers=service.auth("acme"))
    assert r.status_code == 200 and r.json()["budget"]["remaining"] == {"epsilon": 4.0}
