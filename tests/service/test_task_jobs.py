"""Through the service: a tenant's own task (a task spec in the job's
parameters) on its own datasets, with an out-of-distribution public dataset; bad specs and
bad data refused at submission, naming the field and the line, never the content."""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from privlm.accounting import PrivacyLedger
from tests.service.conftest import assert_names_no_server_path, job, run_queue, submit

SPEC = {
    "name": "ticket-topic",
    "labels": {"billing": "Billing", "outage": "Outage"},
    "template": "Ticket ({channel}): {text}\nTopic:",
}
TOPICS = {"billing": "charged twice", "outage": "site is down"}


def private_jsonl(n=32):
    rows = []
    for i in range(n):
        topic = "billing" if i % 2 else "outage"
        rows.append({"text": f"{TOPICS[topic]} #{i}", "label": topic, "user_id": f"u{i}",
                     "channel": "mail"})  # fmt: skip
    return "\n".join(map(json.dumps, rows))


def public_jsonl(n=10):  # out of distribution: headlines, not tickets
    return "\n".join(
        json.dumps({"text": f"storm closes roads {i}", "channel": "web"}) for i in range(n)
    )


def upload(service, text, **form):
    r = service.upload("acme", text, filename="d.jsonl", fields="channel", **form)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_a_template_field_is_stored_only_when_the_upload_names_it(service):
    r = service.upload("acme", private_jsonl(), filename="d.jsonl")
    assert r.status_code == 400 and "'channel'" in r.json()["error"]["message"]
    assert "fields" in r.json()["error"]["message"]
    bad = service.upload("acme", private_jsonl(), filename="d.jsonl", fields="a b")
    assert bad.status_code == 400


def test_pate_and_prompt_dpsgd_jobs_learn_a_tenants_own_task(service):
    private = upload(service, private_jsonl(), budget_epsilon=60)
    public = upload(service, public_jsonl(), public="true")
    pate = submit(
        service, "acme", "pate", private, task_spec=SPEC, public_dataset_id=public, teachers=8,
        threshold=0, sigma_threshold=1, sigma=1, teacher_votes="labels", student_candidates=2,
        holdout=3,
    )  # fmt: skip
    assert pate["params"]["task_spec"]["name"] == "ticket-topic"  # stored with the job
    dp = submit(service, "acme", "prompt-dpsgd", private, task_spec=SPEC, epsilon=4, epochs=1,
                batch_size=8)  # fmt: skip
    assert dp["epsilon"]["planned"] == 4
    run_queue(service)
    done = job(service, "acme", pate["id"])
    assert done["status"] == "succeeded", done
    dp_done = job(service, "acme", dp["id"])
    assert dp_done["status"] == "succeeded", dp_done["error"]
    ledger = PrivacyLedger(service.ledgers, f"dataset-{private}")
    assert ledger.count() >= 2 and ledger.spent().epsilon <= 60
    art = service.client.get(f"/v1/jobs/{pate['id']}/artifact", headers=service.auth("acme"))
    assert_names_no_server_path(service, art.content)
    student = json.loads(zipfile.ZipFile(io.BytesIO(art.content)).read("student_prompt.json"))
    assert student["task"] == "ticket-topic"
    assert all("storm" in d["text"] and d["label"] in SPEC["labels"] for d in student["demos"])
    art = service.client.get(f"/v1/jobs/{dp['id']}/artifact", headers=service.auth("acme"))
    assert_names_no_server_path(service, art.content)
    statement = json.loads(zipfile.ZipFile(io.BytesIO(art.content)).read("privacy.json"))
    assert statement["task"] == "ticket-topic" and statement["unit"] == "user"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"task_spec": {**SPEC, "labels": ["billing"]}}, "field 'labels'"),
        ({"task_spec": {**SPEC, "template": "no placeholder"}}, "field 'template'"),
        ({"task_spec": {**SPEC, "columns": {"text": "body"}}}, "renames text"),
        ({"task_spec": SPEC, "task": "sst2"}, "not both"),
        ({}, "not both"),
    ],
)
def test_a_bad_task_spec_is_refused_at_submission(service, params, message):
    private = upload(service, private_jsonl())
    r = service.client.post("/v1/jobs", headers=service.auth("acme"),
                            json={"kind": "prompt-dpsgd", "dataset_id": private, "params": params})  # fmt: skip
    assert r.status_code == 400 and message in r.json()["error"]["message"], r.text


def test_data_that_does_not_fit_the_task_is_refused_at_submission(service):
    rows = private_jsonl(4).splitlines()
    rows[2] = json.dumps(
        {"text": "Jane Roe's card", "label": "fraud", "user_id": "u9", "channel": "mail"}
    )
    private = upload(service, "\n".join(rows))
    r = service.client.post("/v1/jobs", headers=service.auth("acme"),
                            json={"kind": "prompt-dpsgd", "dataset_id": private,
                                  "params": {"task_spec": SPEC}})  # fmt: skip
    msg = r.json()["error"]["message"]
    assert r.status_code == 400 and "line 3: field 'label'" in msg
    assert "Jane" not in msg and "fraud" not in msg


def test_a_prompt_dpsgd_job_over_the_dataset_budget_is_refused_and_releases_nothing(service):
    private = upload(service, private_jsonl(), budget_epsilon=2)
    r = service.client.post(
        "/v1/jobs", headers=service.auth("acme"),
        json={"kind": "prompt-dpsgd", "dataset_id": private,
              "params": {"task_spec": SPEC, "epsilon": 4, "epochs": 1, "batch_size": 8}},
    )  # fmt: skip
    assert r.status_code == 400 and "params.epsilon" in r.json()["error"]["message"]
    # two that each fit at submission, but not together: the second is refused by the ledger
    first, j = (
        submit(service, "acme", "prompt-dpsgd", private, task_spec=SPEC, epsilon=1.9, epochs=1,
               batch_size=8)
        for _ in range(2)
    )  # fmt: skip
    run_queue(service)
    assert job(service, "acme", first["id"])["status"] == "succeeded"
    done = job(service, "acme", j["id"])
    assert done["status"] == "failed" and "budget" in done["error"], done
    assert done["epsilon"]["spent"] == 0.0
    assert PrivacyLedger(service.ledgers, f"dataset-{private}").count() == 1
    art = service.client.get(f"/v1/jobs/{j['id']}/artifact", headers=service.auth("acme"))
    assert art.status_code != 200
