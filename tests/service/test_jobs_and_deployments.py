"""Jobs run by the worker, deployments charged token by token (tiny model)."""

from __future__ import annotations

import json

import pytest

from privlm.accounting import PrivacyLedger
from privlm.accounting.relations import Relation
from privlm.errors import PrivlmError
from tests.service.conftest import (
    assert_names_no_server_path,
    complete,
    deploy,
    job,
    run_queue,
    submit,
)


def test_pmixed_deployment_charges_every_token_then_refuses(service, ensemble_job):
    r = deploy(service, "acme", ensemble_job["id"], mechanism="pmixed", epsilon=8, queries=6)
    assert r.status_code == 201, r.text
    dep = r.json()["id"]
    assert r.json()["params"]["bound"] == "replacement"  # per unit: one member replaced
    assert "replaces one ensemble member" in r.json()["guarantee"]["text"]
    released = 0
    while True:
        r = complete(service, "acme", dep)
        if r.status_code == 429:
            break
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["object"] == "text_completion" and not body["privlm"]["fallback"]
        released += body["usage"]["completion_tokens"]
        ledger = PrivacyLedger(service.ledgers, f"deployment-{dep}")
        assert ledger.count() == released  # every returned token was charged
    err = r.json()["error"]
    assert err["type"] == "budget_exhausted" and "spent" in err["message"]
    assert released == 6
    b = service.client.get(f"/v1/deployments/{dep}/budget", headers=service.auth("acme")).json()
    assert b["queries"] == {"used": 6, "total": 6, "left": 0} and b["exhausted"]
    assert b["spent"]["epsilon"] <= b["budget"]["epsilon"]
    # another tenant can neither query nor inspect it
    assert complete(service, "globex", dep).status_code == 404
    assert (
        service.client.get(
            f"/v1/deployments/{dep}/budget", headers=service.auth("globex")
        ).status_code
        == 404
    )


def test_deployments_of_one_model_share_its_weights(service, ensemble_job):
    """Two deployments of the same public model hold one copy of its weights
    (the runtime's model pool), each with its own adapters and its own ledger."""
    deps = [
        deploy(service, "acme", ensemble_job["id"], mechanism="pmixed", epsilon=5, queries=2)
        for _ in range(2)
    ]
    assert [d.status_code for d in deps] == [201, 201], deps[0].text
    ids = [d.json()["id"] for d in deps]
    for dep in ids:
        assert complete(service, "acme", dep, max_tokens=1).status_code == 200
    runtime = service.state.runtime
    loaded = [runtime._loaded[i] for i in ids]
    assert (
        len(runtime.models) == 1
        and loaded[0].predictor.engine.model is loaded[1].predictor.engine.model
    )
    assert loaded[0].predictor.engine.key != loaded[1].predictor.engine.key
    assert loaded[0].predictor.ledger.name != loaded[1].predictor.ledger.name


def test_fallback_answers_from_the_public_model_flagged(service, ensemble_job):
    dep = deploy(
        service, "acme", ensemble_job["id"], mechanism="pmixed", epsilon=8, queries=2,
        fallback=True,
    ).json()["id"]  # fmt: skip
    first = complete(service, "acme", dep, max_tokens=2).json()
    assert first["privlm"]["private_tokens"] == first["usage"]["completion_tokens"]
    later = complete(service, "acme", dep, max_tokens=3).json()
    assert later["privlm"]["fallback"] is True and later["privlm"]["private_tokens"] == 0
    assert "public model" in later["privlm"]["note"]
    assert PrivacyLedger(service.ledgers, f"deployment-{dep}").count() == 2


def test_an_ensembles_adapters_never_leave_the_service(service, ensemble_job):
    r = service.client.get(f"/v1/jobs/{ensemble_job['id']}/artifact", headers=service.auth("acme"))
    assert r.status_code == 403 and "not differentially private" in r.json()["error"]["message"]


def test_sampling_options_that_void_the_accounting_are_refused(service, ensemble_job):
    dep = deploy(service, "acme", ensemble_job["id"], mechanism="pmixed").json()["id"]
    for kw in ({"temperature": 0.7}, {"top_p": 0.9}, {"n": 2}, {"max_tokens": 10_000}):
        r = complete(service, "acme", dep, **kw)
        assert r.status_code == 400, kw
    assert PrivacyLedger(service.ledgers, f"deployment-{dep}").count() == 0


def test_deployments_must_match_their_job(service, ensemble_job):
    r = deploy(service, "acme", ensemble_job["id"], mechanism="submix")
    assert r.status_code == 400 and "pmixed" in r.json()["error"]["message"]
    assert "or screened" in r.json()["error"]["message"]
    assert deploy(service, "acme", ensemble_job["id"], epsilon=-1).status_code == 400
    r = deploy(service, "acme", ensemble_job["id"], epsilon=1, delta=1e-9)
    assert r.status_code == 400 and "RDP budget" in r.json()["error"]["message"]
    assert deploy(service, "acme", ensemble_job["id"], delta=1).status_code == 400
    assert deploy(service, "globex", ensemble_job["id"]).status_code == 404


def test_dpsgd_job_charges_the_dataset_and_serves_its_adapter(service):
    ds = service.upload("acme", budget_epsilon=5, budget_delta=1e-5).json()
    j = submit(
        service, "acme", "dpsgd", ds["id"], epsilon=2.0, batch_size=8, physical_batch_size=4,
        block_size=16,
    )  # fmt: skip
    # queued together, each fits at submission; together they do not
    j2 = submit(service, "acme", "dpsgd", ds["id"], epsilon=4.9, batch_size=8, block_size=16)
    run_queue(service)
    done = job(service, "acme", j["id"])
    assert done["status"] == "succeeded", done.get("error")
    ledger = PrivacyLedger(service.ledgers, f"dataset-{ds['id']}")
    assert ledger.count() == 1 and done["epsilon"]["spent"] == pytest.approx(ledger.spent().epsilon)
    assert done["epsilon"]["spent"] <= 2.0 + 1e-9
    failed = job(service, "acme", j2["id"])  # refused before training, by the ledger
    assert failed["status"] == "failed" and "refused before training" in failed["error"]
    assert ledger.count() == 1 and failed["epsilon"]["spent"] == 0.0  # its own: nothing
    r = service.client.get(f"/v1/jobs/{j['id']}/artifact", headers=service.auth("acme"))
    assert r.status_code == 200 and r.headers["content-type"] == "application/zip"
    import io
    import zipfile

    names = zipfile.ZipFile(io.BytesIO(r.content)).namelist()
    assert "privacy.json" in names and "adapter_model.safetensors" in names
    assert_names_no_server_path(service, r.content)
    other = service.client.get(f"/v1/jobs/{j['id']}/artifact", headers=service.auth("globex"))
    assert other.status_code == 404
    dep = deploy(service, "acme", j["id"], mechanism="adapter").json()["id"]
    out = complete(service, "acme", dep).json()
    assert out["usage"]["completion_tokens"] >= 1
    b = service.client.get(f"/v1/deployments/{dep}/budget", headers=service.auth("acme")).json()
    assert b["per_token_cost"] == 0 and b["training"]["epsilon"] == pytest.approx(
        done["epsilon"]["spent"]
    )


def test_pate_job_labels_public_data_under_the_dataset_budget(service):
    private = "\n".join(
        json.dumps({"text": f"a {'great' if i % 2 else 'awful'} film {i}", "label": "positive" if i % 2 else "negative"})
        for i in range(36)  # about 3 per teacher: units go to teachers by a keyed hash
    )  # fmt: skip
    public = "\n".join(f"a film number {i}" for i in range(12))
    p = service.upload("acme", private, filename="p.jsonl", budget_epsilon=20).json()
    q = service.upload("acme", public, filename="q.txt", public="true").json()
    j = submit(
        service, "acme", "pate", p["id"], task="sst2", public_dataset_id=q["id"], teachers=12,
        threshold=0, sigma_threshold=3, sigma=3, teacher_votes="labels", student_candidates=2,
        holdout=3,
    )  # fmt: skip
    run_queue(service)
    done = job(service, "acme", j["id"])
    assert done["status"] == "succeeded", done.get("error")
    assert 0 < done["epsilon"]["spent"] <= 20
    ledger = PrivacyLedger(service.ledgers, f"dataset-{p['id']}")
    assert ledger.spent().epsilon == pytest.approx(done["epsilon"]["spent"])


def test_a_pate_job_the_budget_cannot_finish_is_refused_at_submission_with_the_number(
    service,
):
    """σ1 = σ2 = 1 on ε 20 affords a few of 12 queries at their worst case: refused (400)
    before any job exists or any charge, naming how many inputs it could label."""
    from privlm.accounting import data_independent_query_curve

    p = service.upload("acme", PRIVATE_SST, filename="p.jsonl", budget_epsilon=20).json()
    public = "\n".join(f"a film number {i}" for i in range(12))
    q = service.upload("acme", public, filename="q.txt", public="true").json()
    r = service.client.post(
        "/v1/jobs", headers=service.auth("acme"),
        json={"kind": "pate", "dataset_id": p["id"], "params": {
            "task": "sst2", "public_dataset_id": q["id"], "sigma_threshold": 1, "sigma": 1}},
    )  # fmt: skip
    ledger = PrivacyLedger(service.ledgers, f"dataset-{p['id']}")
    worst = data_independent_query_curve(1, 1)
    fits = max(
        k for k in range(12) if worst.times(max(k, 1)).to_dp(ledger.budget.delta).epsilon <= 20
    )
    assert r.status_code == 400, r.text
    assert f"affords {fits} of the 12" in r.json()["error"]["message"]
    assert ledger.count() == 0
    listed = service.client.get("/v1/jobs", headers=service.auth("acme")).json()["data"]
    assert listed == []


def test_a_job_on_another_tenants_public_data_is_refused(service):
    p = service.upload("acme").json()
    q = service.upload("globex").json()
    r = service.client.post(
        "/v1/jobs",
        headers=service.auth("acme"),
        json={"kind": "pate", "dataset_id": p["id"], "params": {"task": "sst2", "public_dataset_id": q["id"]}},
    )  # fmt: skip
    assert r.status_code == 404


def test_submix_deployment_charges_its_part_ledgers(service):
    # (α=3, ε=2)-RDP per part is about (6.8, 1e-5)-DP, reserved on the dataset's budget
    ds = service.upload("acme", budget_epsilon=20).json()
    j = submit(
        service, "acme", "ensemble", ds["id"], parts=2, protocol="submix", block_size=16,
        max_blocks=2,
    )  # fmt: skip
    run_queue(service)
    assert job(service, "acme", j["id"])["status"] == "succeeded"
    r = deploy(service, "acme", j["id"], mechanism="submix", epsilon=2, alpha=3, beta=0.5)
    assert r.status_code == 201, r.text
    dep = r.json()["id"]
    total_private = 0
    for _ in range(6):
        r = complete(service, "acme", dep, max_tokens=3)
        if r.status_code == 429:
            break
        body = r.json()
        assert body["privlm"]["public_tokens"] == 0  # no fallback: only charged tokens leave
        total_private += body["privlm"]["private_tokens"]
    b = service.client.get(f"/v1/deployments/{dep}/budget", headers=service.auth("acme")).json()
    assert b["mechanism"] == "submix" and b["spent"]["rdp_epsilon"] <= 2 + 1e-9
    # an order-α RDP value, shown as one, with its (ε, δ) conversion beside it
    from privlm.accounting import RdpCurve

    as_dp = RdpCurve.from_mapping({3.0: 2.0}).to_dp(1e-5).epsilon  # about 6.8
    assert b["budget"]["order"] == 3 and b["budget"]["rdp_epsilon"] == 2
    assert "epsilon" not in b["budget"]
    assert b["budget"]["as_dp"]["epsilon"] == pytest.approx(as_dp) and as_dp > 6
    parts = [PrivacyLedger(service.ledgers, f"deployment-{dep}/part-{i:03d}") for i in range(2)]
    assert all(p.verify() for p in parts)


def test_deployments_reserve_the_dataset_budget_until_one_is_refused(service, ensemble_job):
    """Every deployment of a dataset's ensembles counts against the dataset's
    one budget. Each reserves its whole cost when created; the one that would not fit is
    refused, and what is reserved never exceeds the dataset's ε."""
    from privlm.accounting import Budget, PrivacyLedger
    from privlm.predict.pmixed import PMixEDConfig

    ds_id = ensemble_job["dataset_id"]
    made = []
    for _ in range(20):
        r = deploy(service, "acme", ensemble_job["id"], mechanism="pmixed", epsilon=6, queries=8)
        if r.status_code != 201:
            break
        made.append(r.json()["id"])
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["type"] == "budget_exceeded" and "does not fit" in err["message"]
    assert 1 <= len(made) < 20
    ds = service.client.get(f"/v1/datasets/{ds_id}", headers=service.auth("acme")).json()
    budget = ds["budget"]
    assert budget["spent"]["epsilon"] <= budget["epsilon"] == 8.0
    assert budget["remaining"]["epsilon"] == pytest.approx(8.0 - budget["spent"]["epsilon"])
    assert [c["deployment"] for c in budget["charges"]] == made
    # independently: the reserved curves composed by hand give the ledger's ε, and one more
    # deployment would have gone over
    one = PMixEDConfig(epsilon=6, delta=1e-5, alpha=3, queries=8, sample_rate=1.0).lifetime_curve(2)
    total = one.times(len(made))
    assert total.to_dp(1e-5).epsilon == pytest.approx(budget["spent"]["epsilon"], rel=1e-9)
    assert total.to_dp(1e-5).epsilon <= 8.0 < one.times(len(made) + 1).to_dp(1e-5).epsilon
    # tokens are charged to the deployment's own ledger, never twice to the dataset
    before = PrivacyLedger(service.ledgers, f"dataset-{ds_id}", Budget(8.0, 1e-5)).count()
    assert complete(service, "acme", made[0], max_tokens=2).status_code == 200
    assert PrivacyLedger(service.ledgers, f"dataset-{ds_id}").count() == before
    assert service.client.get("/v1/datasets", headers=service.auth("acme")).json()["data"][0][
        "budget"
    ]["remaining"]["epsilon"] == pytest.approx(budget["remaining"]["epsilon"])


def test_a_dp_job_and_deployments_share_one_dataset_budget(service, ensemble_job):
    """A deployment that fits alone is refused once a DP-SGD job has spent the budget."""
    ds_id = ensemble_job["dataset_id"]
    j = submit(
        service, "acme", "dpsgd", ds_id, epsilon=7.5, batch_size=8, physical_batch_size=4,
        block_size=16,
    )  # fmt: skip
    run_queue(service)
    assert job(service, "acme", j["id"])["status"] == "succeeded"
    r = deploy(service, "acme", ensemble_job["id"], mechanism="pmixed", epsilon=6, queries=8)
    assert r.status_code == 409 and r.json()["error"]["type"] == "budget_exceeded"


def test_a_jft_job_says_sdp_in_its_job_artefact_card_and_deployment(service):
    """A JFT model is (ε, δ)-SDP under its policy, never presented as DP."""
    import io
    import zipfile

    ds = service.upload("acme").json()
    j = submit(
        service, "acme", "jft", ds["id"], epsilon=3.0, batch_size=8, physical_batch_size=4,
        block_size=16, detector="regex",
    )  # fmt: skip
    run_queue(service)
    done = job(service, "acme", j["id"])
    assert done["status"] == "succeeded", done.get("error")
    assert done["guarantee"]["kind"] == "SDP" and done["guarantee"]["dp_epsilon"] is None
    assert "no ordinary DP guarantee" in done["guarantee"]["text"]
    r = service.client.get(f"/v1/jobs/{j['id']}/artifact", headers=service.auth("acme"))
    assert_names_no_server_path(service, r.content)
    files = zipfile.ZipFile(io.BytesIO(r.content))
    privacy = json.loads(files.read("privacy.json"))
    assert privacy["guarantee_kind"] == "SDP" and privacy["dp_epsilon"] is None
    assert privacy["policy"] == "regex" and privacy["mechanism"].startswith("Just Fine-tune")
    # the dataset's budget shows JFT's spending apart from DP spending, never as DP
    budget = service.client.get(f"/v1/datasets/{ds['id']}", headers=service.auth("acme")).json()[
        "budget"
    ]
    by = budget["spent_by_guarantee"]
    assert by["DP"]["epsilon"] == 0.0 and by["SDP"]["epsilon"] > 0
    assert by["SDP"]["epsilon"] == pytest.approx(budget["spent"]["epsilon"])
    assert "selective DP" in by["SDP"]["note"]
    assert {c["guarantee"] for c in budget["charges"]} == {"SDP"}
    card = files.read("README.md").decode()
    assert "-SDP under the policy 'regex'; ordinary DP: none" in card
    assert ")-DP per" not in card  # never a plain DP claim
    dep = deploy(service, "acme", j["id"], mechanism="adapter")
    assert dep.status_code == 201, dep.text
    assert dep.json()["guarantee"]["kind"] == "SDP"
    b = service.client.get(
        f"/v1/deployments/{dep.json()['id']}/budget", headers=service.auth("acme")
    ).json()
    assert b["training"]["guarantee_kind"] == "SDP" and "not DP" in b["note"]
    c = complete(service, "acme", dep.json()["id"], max_tokens=2).json()
    assert "SDP" in c["privlm"]["note"] and "not DP" in c["privlm"]["note"]
    models = service.client.get("/v1/models", headers=service.auth("acme")).json()
    (m,) = [m for m in models["data"] if m["id"] == dep.json()["id"]]
    assert m["object"] == "model" and m["privlm"]["guarantee"]["kind"] == "SDP"


def test_a_dataset_that_requires_dp_refuses_jft(service):
    ds = service.upload("acme", require_dp="true").json()
    assert ds["require_dp"] is True
    r = service.client.post(
        "/v1/jobs",
        headers=service.auth("acme"),
        json={"kind": "jft", "dataset_id": ds["id"], "params": {}},
    )
    assert r.status_code == 400 and "requires DP-only artefacts" in r.json()["error"]["message"]
    submit(service, "acme", "dpsgd", ds["id"])  # DP-SGD is still accepted
    assert service.upload("acme", "other notes\nmore").json()["require_dp"] is False


@pytest.mark.fast
def test_a_database_from_before_require_dp_is_migrated(tmp_path):
    import sqlite3

    from privlm.service.db import make_engine

    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.execute(
        "CREATE TABLE datasets (id VARCHAR(40) PRIMARY KEY, tenant_id VARCHAR(40), name "
        "VARCHAR(200), format VARCHAR(8), records INTEGER, bytes INTEGER, path TEXT, "
        "budget_epsilon FLOAT, budget_delta FLOAT, perturbation TEXT, created_at DATETIME)"
    )
    con.execute("INSERT INTO datasets (id, name) VALUES ('ds_old', 'kept')")
    con.commit()
    con.close()
    engine = make_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        row = conn.exec_driver_sql("SELECT name, require_dp FROM datasets").one()
    assert tuple(row) == ("kept", 0)


@pytest.mark.fast
def test_the_service_never_passes_a_seed():
    """A tenant cannot ask for (or be given) reproducible noise."""
    from privlm.service import job_kinds, job_params

    for kind in job_kinds.JOB_KINDS.values():
        assert not any("seed" in f for f in kind.params.model_fields), kind.name
    with pytest.raises(PrivlmError, match="seed"):
        job_kinds.validate_params("dpsgd", {"seed": 0})
    params = job_kinds.validate_params("dpsgd", {})
    assert isinstance(params, job_params.DpSgdParams) and params.config(1e-5).seed is None


def test_a_deployment_reserved_per_part_is_restated_per_unit_on_its_dataset(service, ensemble_job):
    """A deployment reserved under a per-part bound (stored before the per-unit bound, or
    with no bound: Jensen's) is restated when it loads: its dataset's ledger is charged the
    excess of its per-unit lifetime over what was reserved, once."""
    from privlm.service.db import Deployment
    from privlm.service.deployments import deployment_bound, parse_request

    legacy = {"job_id": "j", "mechanism": "pmixed", "epsilon": 8.0, "delta": 1e-5,
              "queries": 6, "alpha": 3.0, "sample_rate": 0.03, "beta": None, "fallback": False}  # fmt: skip
    assert deployment_bound(legacy) == "jensen"
    assert deployment_bound(parse_request({"job_id": "j"}).model_dump()) == "replacement"
    r = deploy(service, "acme", ensemble_job["id"], mechanism="pmixed", bound="expansion")
    assert r.status_code == 400 and "per part" in r.json()["error"]["message"]

    dep = deploy(service, "acme", ensemble_job["id"], mechanism="pmixed", queries=6).json()["id"]
    with service.state.sessions() as session:  # as a deployment made before the per-unit bound
        row = session.get(Deployment, dep)
        params = json.loads(row.params)
        params.pop("bound")
        row.params = json.dumps(params)
        session.commit()
    assert complete(service, "acme", dep, max_tokens=1).status_code == 200
    dataset = PrivacyLedger(service.ledgers, f"dataset-{ensemble_job['dataset_id']}")
    restated = [c for c in dataset.charges() if c.mechanism == "deployment-reservation-restatement"]
    assert len(restated) == 1 and restated[0].params["deployment"] == dep
    assert dataset.spent().epsilon <= dataset.budget.epsilon


def test_a_legacy_deployment_that_no_longer_fits_is_restated_in_full_as_an_overdraft(service):
    """The audit's example: 8 parts, q = 0.05, 1,024 tokens released under the per-part
    (expansion) bound, on an ε = 8 dataset. Restated per unit they cost ε ≈ 18.2 (a concrete
    neighbouring pair reaches exact divergence 1.42× the per-part figure). The restatement
    used to charge the dataset nothing once it did not fit, and admit later work against
    ε 8.0. Now the whole per-unit cost is recorded, at the order the tokens were released
    (not recorded with the legacy tokens: read off their curves), as an overdraft: the
    dataset refuses all further work, saying why, and so does the deployment."""
    from privlm.accounting import Charge, RdpCurve
    from privlm.accounting.analysis import pmixed as analysis
    from privlm.predict.config import PMixEDConfig
    from privlm.service.db import Deployment

    ds = service.upload("acme", budget_epsilon=8).json()
    j = submit(service, "acme", "ensemble", ds["id"], parts=8, block_size=16, max_blocks=1)
    assert run_queue(service) == 1 and job(service, "acme", j["id"])["status"] == "succeeded"
    r = deploy(service, "acme", j["id"], mechanism="pmixed", queries=1024, sample_rate=0.05)
    assert r.status_code == 201, r.text
    dep = r.json()["id"]
    with service.state.sessions() as session:  # as a deployment made before the per-unit bound
        row = session.get(Deployment, dep)
        params = json.loads(row.params)
        row.params = json.dumps({**params, "bound": "expansion"})
        session.commit()
    cfg = PMixEDConfig(epsilon=8.0, delta=1e-5, alpha=3, queries=1024, sample_rate=0.05)
    radius = analysis.solve_radius(cfg.per_query_rdp, 3, 8, 0.05, bound="expansion")
    legacy = RdpCurve.from_mapping(analysis.query_rdp_curve(radius, 3, 8, 0.05, "expansion"))
    ledger = PrivacyLedger(service.ledgers, f"deployment-{dep}")
    with ledger.transaction() as tx:  # 1,024 tokens as the old version charged them
        for i in range(1024):
            tx.charge(Charge("pmixed", rdp=legacy, params={"query": i + 1, "radius": radius,
                                                            "q": 0.05, "bound": "expansion"}, relation=Relation.RECORD))  # fmt: skip
    dataset = PrivacyLedger(service.ledgers, f"dataset-{ds['id']}")
    assert dataset.spent().epsilon == pytest.approx(8.0, abs=1e-6)  # what it used to keep

    r = complete(service, "acme", dep, max_tokens=1)
    assert r.status_code == 429, r.text
    per_unit = RdpCurve.from_mapping(analysis.query_rdp_curve(radius, 3, 8, 0.05)).times(1024)
    assert per_unit.to_dp(1e-5).epsilon == pytest.approx(18.19, abs=0.1)
    assert dataset.spent().epsilon >= per_unit.to_dp(1e-5).epsilon * (1 - 1e-9)
    assert f"deployment {dep}" in (dataset.overdrawn() or "")
    budget = service.client.get(f"/v1/datasets/{ds['id']}", headers=service.auth("acme"))
    assert budget.json()["budget"]["overdrawn"] and budget.json()["budget"]["remaining"] == {
        "epsilon": 0.0
    }
    r = deploy(service, "acme", j["id"], mechanism="pmixed", queries=8, epsilon=7)
    assert r.status_code == 409 and "overdrawn" in r.json()["error"]["message"], r.text
    restated = [c for c in dataset.charges() if c.mechanism == "deployment-reservation-restatement"]
    assert len(restated) == 1
    complete(service, "acme", dep, max_tokens=1)  # reloaded or not: restated once
    assert dataset.count() == len(dataset.charges())


PRIVATE_SST = "\n".join(
    json.dumps({"text": f"a {'great' if i % 2 else 'awful'} film {i}", "label": "positive" if i % 2 else "negative"})
    for i in range(36)
)  # fmt: skip


def pate_on(service, private_id, public_id):
    return service.client.post(
        "/v1/jobs",
        headers=service.auth("acme"),
        json={"kind": "pate", "dataset_id": private_id,
              "params": {"task": "sst2", "public_dataset_id": public_id}},
    )  # fmt: skip


def test_pate_public_inputs_must_be_declared_public_and_share_no_private_record(service):
    p = service.upload("acme", PRIVATE_SST, filename="p.jsonl", budget_epsilon=20).json()
    other = service.upload("acme", "an unrelated private note\nand another", budget_epsilon=4)
    for public_id in (p["id"], other.json()["id"]):  # itself, or another budgeted dataset
        r = pate_on(service, p["id"], public_id)
        assert r.status_code == 400 and "verbatim" in r.json()["error"]["message"]
    mixed = "\n".join([*(f"a film number {i}" for i in range(10)), "a great film 3"])
    r = service.upload("acme", mixed, filename="q.txt", public="true")  # a private record
    message = r.json()["error"]["message"]
    assert r.status_code == 400 and "1 of its 11 records" in message
    assert "great film" not in message  # the count, never the text
    clean = "\n".join(f"a film number {i}" for i in range(10))
    q = service.upload("acme", clean, filename="q.txt", public="true").json()
    assert q["kind"] == "public" and q["budget"] is None
    # later, one of its records is uploaded as private data (another dataset's)
    service.upload("acme", "a film number 4\nsomething else", budget_epsilon=4)
    r = pate_on(service, p["id"], q["id"])
    message = r.json()["error"]["message"]
    assert r.status_code == 400 and "1 of the 10 public inputs" in message
    assert "film number" not in message
    assert PrivacyLedger(service.ledgers, f"dataset-{p['id']}").count() == 0
    r = service.client.post(  # a public dataset has no budget: no private job on it
        "/v1/jobs", headers=service.auth("acme"), json={"kind": "dpsgd", "dataset_id": q["id"]}
    )
    assert r.status_code == 400 and "public" in r.json()["error"]["message"]


def test_the_same_records_uploaded_again_join_the_first_budget(service):
    first = service.upload("acme", "note one\nnote two\nnote three", budget_epsilon=4).json()
    again = service.upload("acme", "note one\nnote two\nnote three", budget_epsilon=4).json()
    assert again["budget_of"] == first["id"] and "joins that budget" in again["budget_note"]
    as_jsonl = "\n".join(json.dumps({"text": t}) for t in ("note three", "note one", "note two"))
    reordered = service.upload("acme", as_jsonl, filename="n.jsonl").json()  # record for record
    assert reordered["budget_of"] == first["id"]
    public = service.upload("acme", "note one\nnote two\nnote three", public="true")
    assert public.status_code == 400 and "cannot be declared public" in public.text
    other = service.upload("globex", "note one\nnote two\nnote three").json()  # another tenant
    assert "budget_of" not in other
    fresh = service.upload("acme", "note four\nnote five").json()
    assert "budget_of" not in fresh and "default" in fresh["budget_note"]


def test_a_screened_deployment_reserves_c_paid_tokens_and_charges_before_release(
    service, ensemble_job
):  # fmt: skip
    from privlm.predict.screened import INSTANCE, PAID

    r = deploy(
        service, "acme", ensemble_job["id"], mechanism="screened", epsilon=8, paid_tokens=2,
        threshold=0.0,
    )  # fmt: skip
    assert r.status_code == 201, r.text
    dep = r.json()["id"]
    assert "2 paid tokens and any number of free ones" in r.json()["guarantee"]["text"]
    dataset = PrivacyLedger(service.ledgers, f"dataset-{ensemble_job['dataset_id']}")
    reservation = [c for c in dataset.charges() if c.params.get("deployment") == dep]
    assert reservation[0].params["settings"]["paid_tokens"] == 2
    ledger = PrivacyLedger(service.ledgers, f"deployment-{dep}")
    paid = free = 0
    for _ in range(40):
        r = complete(service, "acme", dep, max_tokens=2)
        if r.status_code == 429:
            break
        body = r.json()["privlm"]
        free += body.get("free_tokens", 0)
        paid += body["private_tokens"] - body.get("free_tokens", 0)
        kinds = [c.mechanism for c in ledger.charges()]
        assert kinds.count(PAID) == paid and kinds.count(INSTANCE) >= 1  # charged first
    assert r.status_code == 429 and r.json()["error"]["type"] == "budget_exhausted"
    assert paid == 2
    b = service.client.get(f"/v1/deployments/{dep}/budget", headers=service.auth("acme")).json()
    assert b["mechanism"] == "screened-pmixed" and b["queries"]["used"] == 2
    assert b["spent"]["epsilon"] <= 8.0 and "threshold_noise" not in json.dumps(b)


def test_an_in_context_ensemble_is_built_deployed_and_charged_through_the_api(service):
    """In-context members from the service: no training; the deployment reserves its
    lifetime on the dataset's budget and charges every token; the budget says the tokens
    left and why ε grows fast at first."""
    ds = service.upload("acme").json()
    j = submit(service, "acme", "ensemble", ds["id"], parts=20, members="in-context",
               prompt_tokens=32)  # fmt: skip
    lora = service.client.post(
        "/v1/jobs", headers=service.auth("acme"),
        json={"kind": "ensemble", "dataset_id": ds["id"], "params": {"parts": 300}},
    )  # fmt: skip
    assert lora.status_code == 400 and "in-context" in lora.text, lora.text  # LoRA: ≤ 128 parts
    run_queue(service)
    done = job(service, "acme", j["id"])
    assert done["status"] == "succeeded", done.get("error")
    r = deploy(service, "acme", j["id"], mechanism="pmixed", queries=64, sample_rate=0.5)
    assert r.status_code == 201, r.text
    dep = r.json()["id"]
    body = complete(service, "acme", dep, max_tokens=3).json()
    assert body["privlm"]["private_tokens"] == 3
    b = service.client.get(f"/v1/deployments/{dep}/budget", headers=service.auth("acme")).json()
    assert b["queries"] == {"used": 3, "total": 64, "left": 61}
    assert 0 < b["growth"]["later_token_epsilon"] < b["growth"]["first_token_epsilon"]


@pytest.mark.parametrize(
    ("mechanism", "settings"),
    [("pmixed", {"queries": 4}), ("screened", {"paid_tokens": 4, "threshold": 0.2})],
)
def test_a_deployment_states_what_its_reservation_records(
    service, ensemble_job, mechanism, settings
):
    """The deployment's (ε, δ) is composed from the charges its dataset's budget recorded
    for it (the reservation, then any restatement), not restated from its settings."""
    from privlm.accounting import Charge, RdpCurve
    from privlm.accounting.statements import recorded_guarantee
    from privlm.service.db import Dataset
    from privlm.service.deployments import RESTATEMENT

    r = deploy(service, "acme", ensemble_job["id"], mechanism=mechanism, epsilon=6, **settings)
    assert r.status_code == 201, r.text
    dep = r.json()
    state = service.state.service
    with state.sessions.begin() as s:
        ledger = state.dataset_ledger(s.get(Dataset, ensemble_job["dataset_id"]))

    def mine(rec) -> bool:
        return rec.params.get("deployment") == dep["id"]

    def shown() -> dict:
        got = service.client.get(f"/v1/deployments/{dep['id']}", headers=service.auth("acme"))
        return got.json()["guarantee"]

    first = recorded_guarantee(ledger, mine, 1e-5)
    assert shown()["epsilon"] == pytest.approx(first.epsilon) and first.epsilon <= 6
    assert f"({first.epsilon:.4g}, 1e-05)-DP" in shown()["text"]
    ledger.charge(Charge(
        RESTATEMENT, rdp=RdpCurve.from_arrays(ledger.orders, [0.5] * len(ledger.orders)),
        relation=Relation.UNIT, params={"deployment": dep["id"]},
    ))  # fmt: skip
    after = recorded_guarantee(ledger, mine, 1e-5)
    assert after.epsilon > first.epsilon
    assert shown()["epsilon"] == pytest.approx(after.epsilon)  # the record moved it
    (model,) = [
        m for m in service.client.get("/v1/models", headers=service.auth("acme")).json()["data"]
        if m["id"] == dep["id"]
    ]  # fmt: skip
    assert model["privlm"]["guarantee"]["epsilon"] == pytest.approx(after.epsilon)


def test_a_deployment_without_a_recorded_reservation_says_nothing_is_covered():
    from privlm.predict.config import PMixEDConfig
    from privlm.predict.mechanisms import mechanism

    got = mechanism("pmixed").guarantee(PMixEDConfig(epsilon=7), {}).to_dict()
    assert "no reservation is recorded" in got["text"] and "epsilon" not in got
    assert "7" not in got["text"]  # the setting is never restated as a guarantee
