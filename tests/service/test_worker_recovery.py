"""Recovery of jobs whose worker died: requeued with a reason, or failed after too many
interruptions; never silently lost."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from datetime import timedelta

from privlm.service.db import Job, make_engine, now, session_factory
from privlm.service.worker import MAX_ATTEMPTS, Worker


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


UPLOADS = itertools.count()


def running_job(service, attempts: int, pid: int, host: str, beat_age: float = 0.0) -> str:
    text = "\n".join(f"a note {i} of upload {next(UPLOADS)}" for i in range(20))
    ds = service.upload("acme", text).json()  # records of its own: a copy would be refused
    r = service.client.post(
        "/v1/jobs", headers=service.auth("acme"), json={"kind": "dpsgd", "dataset_id": ds["id"]}
    )
    job_id = r.json()["id"]
    with session_factory(make_engine(service.settings.db_url)).begin() as s:
        j = s.get(Job, job_id)
        j.status, j.attempts, j.worker_pid, j.worker_host = "running", attempts, pid, host
        j.started_at = j.heartbeat_at = now() - timedelta(seconds=beat_age)
    return job_id


def worker(service) -> Worker:
    return Worker(service.settings.db_url, service.settings.data_dir, "tiny")


def status(service, job_id):
    return service.client.get(f"/v1/jobs/{job_id}", headers=service.auth("acme")).json()


def test_a_job_whose_worker_died_is_requeued_with_the_reason(service):
    w = worker(service)
    job_id = running_job(service, 1, dead_pid(), w.host)
    assert w.recover() == [job_id]
    j = status(service, job_id)
    assert j["status"] == "queued"
    assert "interrupted" in j["events"][-1]["what"] and "gone" in j["events"][-1]["what"]


def test_a_silent_worker_on_another_host_is_detected_by_its_heartbeat(service):
    w = worker(service)
    fresh = running_job(service, 1, 12345, "elsewhere", beat_age=1)
    stale = running_job(service, 1, 12345, "elsewhere", beat_age=3600)
    assert w.recover() == [stale]
    assert status(service, fresh)["status"] == "running"


def test_too_many_interruptions_fail_the_job_with_a_reason(service):
    w = worker(service)
    job_id = running_job(service, MAX_ATTEMPTS, dead_pid(), w.host)
    w.recover()
    j = status(service, job_id)
    assert j["status"] == "failed" and f"interrupted {MAX_ATTEMPTS} times" in j["error"]
    assert json.dumps(j["events"]).count("failed") == 1


def test_a_live_worker_keeps_its_job(service):
    w = worker(service)
    job_id = running_job(service, 1, w.pid, w.host)
    other = Worker(service.settings.db_url, service.settings.data_dir, "tiny")
    assert other.recover() == []  # same pid and host: its own (alive) worker
    assert status(service, job_id)["status"] == "running"
