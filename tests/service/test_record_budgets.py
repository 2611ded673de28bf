"""One budget per body of records, for a tenant's whole history (docs/service.md, "The
dataset's budget"): each failure an attacker found, reproduced through the API.

- delete, then upload again: the spent budget stays, and reservations with it;
- a subset, or the records with one row duplicated: the same budget;
- private records declared public (even after their dataset was deleted), or used as a
  PromptPATE public input of another dataset: refused with the count, never the text;
- a refused upload leaves nothing on disk, and leftovers of a crash are swept at start;
- the door's cases: 400 with the reason.
"""

from __future__ import annotations

import hashlib
import json

import pytest
from sqlalchemy import select

from privlm.accounting import PrivacyLedger
from privlm.accounting.relations import Relation
from tests.service.conftest import complete, deploy, job, run_queue, submit

TEXT = "\n".join(f"ticket {i}: the printer on floor {i % 5} jams again" for i in range(60))


def remaining(service, tenant, dataset_id):
    body = service.client.get(f"/v1/datasets/{dataset_id}", headers=service.auth(tenant)).json()
    return body["budget"]["remaining"]["epsilon"]


def test_delete_then_upload_again_keeps_the_spent_budget(service):
    ds = service.upload("acme", TEXT, budget_epsilon=8).json()
    j = submit(service, "acme", "dpsgd", ds["id"], epsilon=3, epochs=1, block_size=16)
    assert run_queue(service) == 1 and job(service, "acme", j["id"])["status"] == "succeeded"
    left = remaining(service, "acme", ds["id"])
    assert left < 8
    r = service.client.delete(f"/v1/datasets/{ds['id']}", headers=service.auth("acme"))
    assert r.status_code == 409 and j["id"] in r.json()["error"]["message"]
    assert "cascade" in r.json()["error"]["message"]
    r = service.client.delete(f"/v1/datasets/{ds['id']}?cascade=true", headers=service.auth("acme"))
    assert r.status_code == 200 and r.json()["deleted_artefacts"] == [j["id"]]
    assert "kept" in r.json()["budget"]
    art = service.client.get(f"/v1/jobs/{j['id']}/artifact", headers=service.auth("acme"))
    assert art.status_code == 410
    listed = service.client.get("/v1/datasets", headers=service.auth("acme")).json()["data"]
    assert ds["id"] not in [d["id"] for d in listed]
    assert (
        service.client.get(f"/v1/datasets/{ds['id']}", headers=service.auth("acme")).status_code
        == 404
    )

    again = service.upload("acme", TEXT, budget_epsilon=8)
    assert again.status_code == 201, again.text
    body = again.json()
    assert body["budget_of"] == ds["id"] and "deleted" in body["budget_note"]
    assert body["budget"]["remaining"]["epsilon"] == pytest.approx(left)
    assert f"ε {left:.4g} of 8 left" in body["budget_note"]


def test_a_deleted_datasets_deployment_stops_and_its_reservation_stays(service):
    ds = service.upload("acme", TEXT, budget_epsilon=100).json()
    j = submit(service, "acme", "ensemble", ds["id"], parts=2, block_size=16, max_blocks=1)
    assert run_queue(service) == 1
    dep = deploy(service, "acme", j["id"], mechanism="pmixed", epsilon=20, queries=8).json()["id"]
    assert complete(service, "acme", dep, max_tokens=1).status_code == 200
    reserved = 100 - remaining(service, "acme", ds["id"])
    r = service.client.delete(f"/v1/datasets/{ds['id']}", headers=service.auth("acme"))
    assert r.status_code == 409 and dep in r.json()["error"]["message"]
    r = service.client.delete(f"/v1/datasets/{ds['id']}?cascade=true", headers=service.auth("acme"))
    assert r.json()["stopped_deployments"] == [dep]
    assert complete(service, "acme", dep, max_tokens=1).status_code == 404
    again = service.upload("acme", TEXT, budget_epsilon=100).json()
    assert again["budget"]["remaining"]["epsilon"] == pytest.approx(100 - reserved)


@pytest.mark.parametrize(
    "variant",
    [
        "\n".join(TEXT.split("\n")[:-1]),  # minus one row
        TEXT + "\n" + TEXT.split("\n")[7],  # one row duplicated
        "\n".join([*TEXT.split("\n")[:5], "a record of its own"]),  # a subset and one more
    ],
    ids=["subset", "duplicate-row", "overlap"],
)
def test_a_subset_or_a_duplicated_row_joins_the_same_budget(service, variant):
    first = service.upload("acme", TEXT, budget_epsilon=8).json()
    r = service.upload("acme", variant, budget_epsilon=8)
    assert r.status_code == 201 and r.json()["budget_of"] == first["id"]
    assert "joins that budget" in r.json()["budget_note"]
    # a reservation through the first dataset shows on the second: one ledger
    ledger = PrivacyLedger(service.ledgers, f"dataset-{first['id']}")
    from privlm.accounting import Charge

    ledger.charge(Charge("test", epsilon=1.5, relation=Relation.RECORD))
    assert remaining(service, "acme", r.json()["id"]) == pytest.approx(6.5)


def test_records_of_two_budgets_are_refused_and_a_budget_asked_for_is_said_not_to_apply(service):
    a = service.upload("acme", "alpha one\nalpha two", budget_epsilon=4).json()
    b = service.upload("acme", "beta one\nbeta two", budget_epsilon=6).json()
    r = service.upload("acme", "alpha one\nbeta two")
    message = r.json()["error"]["message"]
    assert r.status_code == 400 and a["id"] in message and b["id"] in message
    assert "alpha" not in message.replace(a["name"], "")  # ids and names, never a record
    joined = service.upload("acme", "alpha two\nalpha three", budget_epsilon=2).json()
    assert joined["budget"]["epsilon"] == 4 and "does not apply" in joined["budget_note"]


def test_private_records_are_never_public_even_after_deletion(service):
    ds = service.upload("acme", TEXT).json()
    subset = "\n".join(TEXT.split("\n")[:59])
    r = service.upload("acme", subset, public="true")
    assert r.status_code == 400 and "59 of its 59 records" in r.json()["error"]["message"]
    assert "printer" not in r.json()["error"]["message"]
    assert (
        service.client.delete(f"/v1/datasets/{ds['id']}", headers=service.auth("acme")).status_code
        == 200
    )
    r = service.upload("acme", subset, public="true")
    assert r.status_code == 400 and "deleted" in r.json()["error"]["message"]


def test_the_record_index_holds_keyed_digests_only(service):
    from privlm.service.db import RecordDigest

    service.upload("acme", "a short secret")
    with service.state.sessions() as s:
        digests = list(s.scalars(select(RecordDigest.digest)))
    plain = hashlib.sha256(b"a short secret").hexdigest()
    assert digests and plain not in digests


def test_a_lost_record_key_stops_the_service_rather_than_forget_budgets(service):
    from privlm.service.app import create_app
    from privlm.service.record_index import KEY_FILE, RecordKeyError

    service.upload("acme", "one record")
    key = service.settings.data_dir / KEY_FILE
    key.unlink()
    with pytest.raises(RecordKeyError, match="missing"):
        create_app(service.settings)
    key.write_bytes(b"\0" * 32)
    with pytest.raises(RecordKeyError, match="not the record key"):
        create_app(service.settings)


# -- the door ---------------------------------------------------------------------------------


def leftovers(service):
    return list(service.settings.data_dir.glob("tenants/*/datasets/.upload-*"))


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("s.jsonl", '{"text": "\\ud800 lone"}\n', "surrogate"),
        ("d.jsonl", '{"text": "a", "x": ' + "[" * 3000 + "]" * 3000 + "}\n", "nested deeper"),
        ("n.txt", "fine\nnul \x00 here\n", "NUL byte"),
        ("n.jsonl", '{"text": "nul \\u0000 escaped is fine"}\n{"text": "raw \x00"}\n', "NUL byte"),
        ("h.csv", "text,text\na,b\n", "repeats"),
        ("nan.jsonl", '{"text": "a", "label": NaN}\n', "NaN"),
        ("t.jsonl", '{"text": "a", "label": true}\n', "string or an integer"),
        ("m.jsonl", '{"text": "a", "label": 1}\n{"text": "b", "label": "1"}\n', "mix"),
        ("u.jsonl", '{"text": "a", "user_id": {"a": 1}}\n', "user id"),
    ],
)
def test_the_door_answers_400_with_the_reason_and_keeps_nothing(service, name, content, reason):
    r = service.upload("acme", content, filename=name)
    assert r.status_code == 400, r.text
    assert reason in r.json()["error"]["message"]
    assert not leftovers(service)
    assert service.client.get("/v1/datasets", headers=service.auth("acme")).json()["data"] == []


def test_records_are_lines_at_newlines_only(service):
    text = "one\fpage\ntwo\vtab\nthree\u2028sep\x85next\x1cfs\n"
    assert service.upload("acme", text).json()["records"] == 3


@pytest.mark.parametrize("epsilon", ["1e-320", "0.001", "0", "-1"])
def test_a_budget_below_the_stated_minimum_is_refused(service, epsilon):
    r = service.upload("acme", "a record", budget_epsilon=epsilon)
    assert r.status_code == 400 and "0.01" in r.json()["error"]["message"]


def test_an_upload_without_a_budget_says_which_it_got(service):
    body = service.upload("acme", "a record").json()
    assert body["budget"]["epsilon"] == 8.0 and "no budget ε was given" in body["budget_note"]
    given = service.upload("acme", "another record", budget_epsilon=3).json()
    assert "budget_note" not in given


def test_a_crash_leftover_is_swept_at_start(service):
    from privlm.service.app import create_app

    service.upload("acme", "a record")
    folder = next(service.settings.data_dir.glob("tenants/*/datasets"))
    (folder / ".upload-ds_0123456789abcdef0123.txt").write_text("half an upload")
    create_app(service.settings)
    assert not leftovers(service)


def test_a_pate_task_whose_verbalisers_share_a_first_token_is_refused_at_submission(service):
    spec = {"name": "bad", "labels": {"a": "okay", "b": "okayish"},
            "template": "Review: {text}\nSentiment:"}  # fmt: skip
    private = "\n".join(
        json.dumps({"text": f"review {i}", "label": "ab"[i % 2]}) for i in range(30)
    )
    p = service.upload("acme", private, filename="p.jsonl").json()
    q = service.upload("acme", "\n".join(f"public {i}" for i in range(10)), public="true").json()
    r = service.client.post(
        "/v1/jobs", headers=service.auth("acme"),
        json={"kind": "pate", "dataset_id": p["id"],
              "params": {"task_spec": spec, "public_dataset_id": q["id"]}},
    )  # fmt: skip
    assert r.status_code == 400 and "same token" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("mechanism", "field"),
    [("screened", "beta"), ("screened", "queries"), ("submix", "paid_tokens"),
     ("pmixed", "svt_share"), ("adapter", "epsilon")],
)  # fmt: skip
def test_deployment_settings_of_another_mechanism_are_refused(service, mechanism, field):
    r = deploy(service, "acme", "job_0123456789abcdef0123", mechanism=mechanism, **{field: 1})
    assert r.status_code == 400 and field in r.json()["error"]["message"]
