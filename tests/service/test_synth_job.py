"""The service's ``synth`` job: charged to the dataset's budget, its texts downloadable and
saved as a public dataset, which any job then uses without a budget."""

from __future__ import annotations

import io
import json
import zipfile

from privlm.accounting import PrivacyLedger
from tests.service.conftest import assert_names_no_server_path, job, run_queue, submit


def reviews(n=24):
    return "\n".join(
        json.dumps({"text": f"the film {i} was {'fine' if i % 2 else 'dull'}",
                    "label": "pos" if i % 2 else "neg"})
        for i in range(n)
    )  # fmt: skip


def test_labels_on_unlabelled_data_are_refused_at_submission_before_any_charge(service):
    r = service.upload("acme", "a note\nanother note\na third", budget_epsilon=10)
    d = r.json()["id"]
    r = service.client.post(
        "/v1/jobs", headers=service.auth("acme"),
        json={"kind": "synth", "dataset_id": d, "params": {"epsilon": 1, "labels": ["a", "b"]}},
    )  # fmt: skip
    assert r.status_code == 400 and "the data has none" in r.json()["error"]["message"], r.text
    assert PrivacyLedger(service.ledgers, f"dataset-{d}").count() == 0
    assert service.client.get("/v1/jobs", headers=service.auth("acme")).json()["data"] == []


def test_a_synth_job_charges_the_budget_and_its_texts_become_a_public_dataset(service):
    r = service.upload("acme", reviews(), filename="r.jsonl", budget_epsilon=10)
    private = r.json()["id"]
    for labels, why in ((None, "declare the label set"), (["neg", "neg"], "given once"),
                        (["neg", "pos", "meh"], "no record has")):  # fmt: skip
        r = service.client.post(
            "/v1/jobs", headers=service.auth("acme"),
            json={"kind": "synth", "dataset_id": private,
                  "params": {"epsilon": 4, "count": 2, "labels": labels}},
        )  # fmt: skip
        assert r.status_code == 400 and why in r.json()["error"]["message"], r.text
    params = dict(
        epsilon=4, count=2, max_tokens=3, members=2, prompt_tokens=16, labels=["neg", "pos"]
    )
    j = submit(service, "acme", "synth", private, **params)
    assert j["epsilon"]["planned"] == 4
    run_queue(service)
    done = job(service, "acme", j["id"])
    assert done["status"] == "succeeded", done["error"]
    ledger = PrivacyLedger(service.ledgers, f"dataset-{private}")
    assert abs(ledger.spent().epsilon - 4) < 1e-6
    art = service.client.get(f"/v1/jobs/{j['id']}/artifact", headers=service.auth("acme"))
    assert_names_no_server_path(service, art.content)
    z = zipfile.ZipFile(io.BytesIO(art.content))
    assert sorted(z.namelist()) == ["synth.jsonl", "synth.jsonl.privacy.json"]
    rows = [json.loads(x) for x in z.read("synth.jsonl").decode().splitlines()]
    assert [x["label"] for x in rows] == ["neg", "pos"]
    # the overlap report is computed on the records: the owner reads it apart; it is in no
    # file of the artefact, and no other tenant reads it
    report = service.client.get(f"/v1/jobs/{j['id']}/curator-report", headers=service.auth("acme"))
    assert report.status_code == 200, report.text
    curator = report.json()["not_private_for_the_curator"]
    assert "not private" in report.json()["note"] and curator["records"] == 24
    overlap = curator["overlap"]
    assert overlap["texts"] == 2 and "longest_run_words_max" in overlap["summary"]
    assert "not DP" in overlap["note"] and len(overlap["per_text"]) == 2
    for name in z.namelist():
        blob = z.read(name).decode()
        assert "longest_run" not in blob and "records_in_batches" not in blob, name
    theirs = service.client.get(f"/v1/jobs/{j['id']}/curator-report",
                                headers=service.auth("globex"))  # fmt: skip
    assert theirs.status_code == 404
    saved = service.client.post(f"/v1/jobs/{j['id']}/dataset", json={"name": "synthetic reviews"},
                                headers=service.auth("acme"))  # fmt: skip
    assert saved.status_code == 201, saved.text
    d = saved.json()
    assert d["kind"] == "public" and d["budget"] is None and d["records"] == 2
    listed = service.client.get("/v1/datasets", headers=service.auth("acme")).json()["data"]
    assert d["id"] in [x["id"] for x in listed]
    other = service.client.get("/v1/datasets", headers=service.auth("globex")).json()["data"]
    assert d["id"] not in [x["id"] for x in other]  # the tenant's own
    # a job that releases no DP result has nothing to save
    ens = submit(service, "acme", "ensemble", private, parts=2)
    no = service.client.post(f"/v1/jobs/{ens['id']}/dataset", json={}, headers=service.auth("acme"))
    assert no.status_code in (403, 409)


def test_a_dp_lora_synth_job_charges_dp_sgds_cost_and_releases_no_adapter(service):
    r = service.upload("acme", reviews(), filename="r.jsonl", budget_epsilon=10)
    private = r.json()["id"]
    j = submit(service, "acme", "synth", private, epsilon=3, count=3, max_tokens=3,
               generator="dp-lora", train_epochs=1, train_batch_size=6, labels=["neg", "pos"])  # fmt: skip
    run_queue(service)
    done = job(service, "acme", j["id"])
    assert done["status"] == "succeeded", done["error"]
    ledger = PrivacyLedger(service.ledgers, f"dataset-{private}")
    (charge,) = ledger.charges()
    assert charge.params["generator"] == "dp-lora" and ledger.spent().epsilon <= 3 + 1e-6
    art = service.client.get(f"/v1/jobs/{j['id']}/artifact", headers=service.auth("acme"))
    assert_names_no_server_path(service, art.content)
    z = zipfile.ZipFile(io.BytesIO(art.content))
    assert sorted(z.namelist()) == ["synth.jsonl", "synth.jsonl.privacy.json"]
    statement = json.loads(z.read("synth.jsonl.privacy.json"))
    assert statement["generator"] == "dp-lora"
    assert statement["epsilon"] == ledger.spent().epsilon
    rows = [json.loads(x) for x in z.read("synth.jsonl").decode().splitlines()]
    assert [x["label"] for x in rows] == ["neg", "neg", "pos"]


def test_a_synth_jobs_scrub_must_name_a_detector_and_is_checked_at_submission(service):
    d = service.upload("acme", reviews(), budget_epsilon=10).json()["id"]
    params = {"epsilon": 1, "labels": ["neg", "pos"], "scrub": "nope"}
    r = service.client.post(
        "/v1/jobs", headers=service.auth("acme"),
        json={"kind": "synth", "dataset_id": d, "params": params},
    )  # fmt: skip
    assert r.status_code in (400, 422) and "unknown detector 'nope'" in r.text, r.text
    assert PrivacyLedger(service.ledgers, f"dataset-{d}").count() == 0
    from privlm.service.job_params import SynthParams

    assert SynthParams(labels=["neg", "pos"], scrub="regex").config(1e-5).scrub == "regex"
