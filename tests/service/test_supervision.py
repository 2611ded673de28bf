"""Supervised workers and what /health says: a worker that dies is started again within a
rate, the pool gives up past it, and /health turns degraded with the reason when a worker
is down, a running job stops beating, or the queue waits with nothing running."""

from __future__ import annotations

from datetime import timedelta

from privlm.service.db import Job, now
from privlm.service.health import STUCK_S, ServiceHealth
from privlm.service.supervision import WorkerPool


class FakeWorker:
    def __init__(self) -> None:
        self.code: int | None = None

    def poll(self) -> int | None:
        return self.code

    def terminate(self) -> None:
        self.code = -15

    def wait(self, timeout: float | None = None) -> int | None:
        return self.code


def test_a_dead_worker_is_started_again_until_the_rate_is_spent():
    made: list[FakeWorker] = []

    def spawn() -> FakeWorker:
        made.append(FakeWorker())
        return made[-1]

    pool = WorkerPool(spawn, size=2, max_restarts=2, window_s=600)
    pool.children = [spawn(), spawn()]
    assert pool.check() == 0 and pool.describe()["alive"] == 2
    made[0].code = 1  # killed: out of memory, a lock error, a bug
    assert pool.check() == 1 and pool.describe() == {
        "expected": 2, "alive": 2, "restarts": 1, "gave_up": False}  # fmt: skip
    pool.children[0].code = 1
    assert pool.check() == 1
    pool.children[0].code = 1  # the third death in the window: not started again
    assert pool.check() == 0
    d = pool.describe()
    assert d["alive"] == 1 and d["gave_up"] and d["restarts"] == 2
    pool.stop()


def test_health_is_degraded_with_the_reason_and_ok_again(service):
    health = ServiceHealth(service.state.sessions)
    health.refresh()
    assert health.report()["status"] == "ok"
    pool = WorkerPool(FakeWorker, size=2)
    pool.children = [FakeWorker(), FakeWorker()]
    pool.children[1].code = 1
    health.workers = pool
    report = health.report()
    assert report["status"] == "degraded" and "1 job worker(s) down" in report["problems"]
    pool.check()
    assert health.report()["status"] == "ok"
    with service.state.sessions.begin() as s:
        tenant = s.query(Job).count()  # no jobs yet
        assert tenant == 0
    ds = service.upload("acme").json()["id"]
    r = service.client.post(
        "/v1/jobs", headers=service.auth("acme"),
        json={"kind": "ensemble", "dataset_id": ds, "params": {"parts": 2}},
    )  # fmt: skip
    with service.state.sessions.begin() as s:
        job = s.get(Job, r.json()["id"])
        job.created_at = now() - timedelta(seconds=STUCK_S + 5)
    health.refresh()
    report = health.report()
    assert report["queue"]["queued"] == 1
    assert any("with none running" in p for p in report["problems"])
    with service.state.sessions.begin() as s:
        job = s.get(Job, r.json()["id"])
        job.status, job.heartbeat_at = "running", now() - timedelta(seconds=300)
    health.refresh()
    assert any("without a heartbeat" in p for p in health.report()["problems"])
    metrics = health.metrics()
    assert "privlm_up 0" in metrics and "privlm_jobs_stale_running 1" in metrics


def test_the_health_route_reports_workers_and_queue(service):
    body = service.client.get("/v1/health").json()
    assert body["status"] in ("ok", "degraded") and body["workers"] is None
    assert "problems" in body and "queue" in body
    text = service.client.get("/metrics").text
    assert "privlm_up" in text
