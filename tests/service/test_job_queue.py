"""Jobs are served fairly across tenants (privlm.service.job_queue): one tenant's long jobs
cannot hold another tenant's queued job, and a queued job shows its place in line."""

from __future__ import annotations

from privlm.service.worker import Worker
from tests.service.conftest import job, submit


def queue_four(service):
    a = service.upload("acme", "acme record one\nacme record two").json()["id"]
    b = service.upload("globex", "globex record one\nglobex record two").json()["id"]
    acme = [submit(service, "acme", "dpsgd", a, epsilon=1)["id"] for _ in range(3)]
    globex = submit(service, "globex", "dpsgd", b, epsilon=1)["id"]
    return acme, globex


def worker(service, cap=1):
    s = service.settings
    return Worker(s.db_url, s.data_dir, s.model, poll=0.05, tenant_cap=cap)


def test_a_tenant_that_queued_first_does_not_hold_the_other_tenants_job(service):
    acme, globex = queue_four(service)
    first, second = worker(service), worker(service)
    assert first.claim() == acme[0]  # the oldest job
    # acme runs one job (its cap): the free worker takes globex's, not acme's second
    assert second.claim() == globex
    assert worker(service).claim() is None  # both tenants at their cap: the rest wait


def test_the_queue_is_round_robin_and_each_job_shows_its_place(service):
    acme, globex = queue_four(service)
    assert [job(service, "acme", j)["queue_position"] for j in acme] == [1, 3, 4]
    assert job(service, "globex", globex)["queue_position"] == 2
    w = worker(service, cap=3)  # one worker, no cap in play: the round-robin order alone
    order = []
    while (claimed := w.claim()) is not None:
        order.append(claimed)
        from privlm.service.db import Job

        with service.state.sessions.begin() as s:  # done: the next one may start
            s.get(Job, claimed).status = "succeeded"
    assert order == [acme[0], globex, acme[1], acme[2]]
    assert job(service, "acme", acme[0])["queue_position"] is None  # no longer queued
