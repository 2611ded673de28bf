"""Jobs users can control (cancel), with honest figures (the job's own ε,
progress with elapsed time and an estimate) and artefacts that never reveal server paths."""

from __future__ import annotations

import io
import json
import os
import threading
import time
import zipfile

import pytest

from privlm.accounting import PrivacyLedger
from privlm.service.worker import Worker
from tests.service.conftest import job, run_queue, submit

DPSGD = {"batch_size": 8, "physical_batch_size": 4, "block_size": 16}


def cancel(service, job_id, tenant="acme"):
    return service.client.post(f"/v1/jobs/{job_id}/cancel", headers=service.auth(tenant))


def test_a_queued_job_is_dropped(service):
    ds = service.upload("acme").json()
    j = submit(service, "acme", "dpsgd", ds["id"], epsilon=2.0, **DPSGD)
    assert cancel(service, j["id"], "globex").status_code == 404  # another tenant's
    r = cancel(service, j["id"])
    assert r.status_code == 200 and r.json()["status"] == "cancelled"
    assert r.json()["epsilon"]["spent"] == 0.0  # this job charged nothing
    assert run_queue(service) == 0  # the worker never sees it
    assert PrivacyLedger(service.ledgers, f"dataset-{ds['id']}").count() == 0
    again = cancel(service, j["id"])
    assert again.status_code == 409 and again.json()["error"]["type"] == "conflict"


def test_a_running_job_stops_at_its_next_step_and_writes_nothing(service):
    ds = service.upload("acme", budget_epsilon=5).json()
    j = submit(service, "acme", "dpsgd", ds["id"], epsilon=2.0, epochs=50, **DPSGD)
    s = service.settings
    stop = threading.Event()
    worker = Worker(s.db_url, s.data_dir, s.model, poll=0.05)
    thread = threading.Thread(target=worker.loop, kwargs={"stop": stop})
    thread.start()
    try:
        end = time.monotonic() + 120
        while (now := job(service, "acme", j["id"]))["progress"]["steps_done"] < 2:
            assert now["status"] in ("queued", "running") and time.monotonic() < end, now
            time.sleep(0.05)
        running = now
        assert running["progress"]["elapsed_s"] > 0 and running["progress"]["eta_s"] > 0
        r = cancel(service, j["id"])
        assert r.status_code == 200 and r.json()["cancel_requested"]
        while (now := job(service, "acme", j["id"]))["status"] == "running":
            assert time.monotonic() < end
            time.sleep(0.05)
    finally:
        stop.set()
        thread.join()
    assert now["status"] == "cancelled", now
    assert now["progress"]["steps_done"] < now["progress"]["steps_total"]
    # DP-SGD charges when its training ends, before it writes: stopped earlier, it released
    # nothing and charged nothing (a charge already made would stay, and be shown)
    ledger = PrivacyLedger(service.ledgers, f"dataset-{ds['id']}")
    assert ledger.count() == 0 and now["epsilon"]["spent"] == 0.0
    assert not any(p.name == j["id"] for p in (s.data_dir / "tenants").rglob("*"))
    art = service.client.get(f"/v1/jobs/{j['id']}/artifact", headers=service.auth("acme"))
    assert art.status_code == 409


def test_a_jobs_epsilon_is_its_own_and_its_artefact_names_no_server_path(service):
    ds = service.upload("acme", budget_epsilon=8).json()
    a = submit(service, "acme", "dpsgd", ds["id"], epsilon=2.0, **DPSGD)
    b = submit(service, "acme", "dpsgd", ds["id"], epsilon=3.0, **DPSGD)
    assert run_queue(service) == 2
    done_a, done_b = job(service, "acme", a["id"]), job(service, "acme", b["id"])
    ledger = PrivacyLedger(service.ledgers, f"dataset-{ds['id']}")
    total = ledger.spent().epsilon
    assert done_a["epsilon"]["spent"] <= 2.0 + 1e-9 and done_b["epsilon"]["spent"] <= 3.0 + 1e-9
    assert max(done_a["epsilon"]["spent"], done_b["epsilon"]["spent"]) < total
    assert done_b["progress"]["eta_s"] is None and done_b["progress"]["elapsed_s"] > 0
    dataset = service.client.get(f"/v1/datasets/{ds['id']}", headers=service.auth("acme")).json()
    assert dataset["budget"]["spent"]["epsilon"] == pytest.approx(total)
    r = service.client.get(f"/v1/jobs/{a['id']}/artifact", headers=service.auth("acme"))
    server_paths = {str(service.settings.data_dir), str(service.settings.data_dir.parent),
                    os.path.expanduser("~")}  # fmt: skip
    with zipfile.ZipFile(io.BytesIO(r.content)) as z:
        for name in z.namelist():
            assert not name.startswith("/") and ".." not in name
            if name.endswith((".json", ".md", ".txt")):
                text = z.read(name).decode()
                for path in server_paths:
                    assert path not in text, (name, path)
        assert json.loads(z.read("adapter_config.json"))["base_model_name_or_path"] == "tiny"
    listing = json.dumps(service.client.get("/v1/jobs", headers=service.auth("acme")).json())
    for path in server_paths:
        assert path not in listing
