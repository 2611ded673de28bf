"""Which queued job runs next: fairly across tenants.

A worker runs one job at a time, and ``privlm serve`` starts ``--workers`` of them (2 by
default). Two rules keep one tenant's long jobs from holding another tenant's job queued:

- **A tenant runs at most ``tenant_cap`` jobs at once** (``workers − 1``, at least 1), so
  with two or more workers one is always free for the other tenants.
- **The queue is served round-robin across tenants.** A job's rank is the number of its
  tenant's jobs served since the queue formed (those running, and those started since the
  oldest queued job was submitted), plus its place among that tenant's queued jobs; the
  lowest rank runs first, and among equals the oldest. A tenant that queues ten jobs, then
  another that queues one, sees that one run second, not eleventh.

``positions`` is the same order, as the API and the page show it: 1 is next in line.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from privlm.service.db import Job


def fair_order(queued: Iterable[Job], served: Counter[str]) -> list[Job]:
    """``queued`` jobs in the order they run, given how many jobs of each tenant were served
    since the queue formed (the module's docstring)."""
    place: Counter[str] = Counter()
    ranked = []
    for job in sorted(queued, key=lambda j: j.created_at):
        ranked.append((served[job.tenant_id] + place[job.tenant_id], job.created_at, job))
        place[job.tenant_id] += 1
    return [job for _, _, job in sorted(ranked, key=lambda r: (r[0], r[1]))]


def _state(s: Session) -> tuple[list[Job], Counter[str], Counter[str]]:
    """The queued jobs, each tenant's running jobs, and each tenant's jobs served since the
    oldest queued job was submitted (running ones included)."""
    queued = list(s.scalars(select(Job).where(Job.status == "queued")))
    running = Counter(s.scalars(select(Job.tenant_id).where(Job.status == "running")))
    served = Counter(running)
    if queued:
        since = min(j.created_at for j in queued)
        served.update(
            s.scalars(
                select(Job.tenant_id).where(
                    Job.status.not_in(("queued", "running")), Job.started_at >= since
                )
            )
        )
    return queued, running, served


def next_job(s: Session, tenant_cap: int) -> Job | None:
    """The queued job a free worker should claim, or None (empty, or every waiting tenant
    already runs ``tenant_cap`` jobs)."""
    queued, running, served = _state(s)
    for job in fair_order(queued, served):
        if running[job.tenant_id] < tenant_cap:
            return job
    return None


def positions(s: Session) -> dict[str, int]:
    """Each queued job's place in line (1: next), across every tenant's jobs; the API shows a
    tenant its own jobs' places only."""
    queued, _, served = _state(s)
    return {job.id: i for i, job in enumerate(fair_order(queued, served), start=1)}
