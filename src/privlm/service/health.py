"""What ``/health`` and ``/metrics`` report: the job workers (their pool, where ``privlm
serve`` supervises one) and the queue, from a snapshot a background thread refreshes, so
the probe itself never waits on the database or a thread (it answers from the event loop
while an upload or a job holds the database).

``degraded``, with the reasons, when a worker is down (or the pool gave up restarting it),
a running job's worker stopped beating, the queue has waited ``STUCK_S`` with nothing
running, or the snapshot itself is older than ``SNAPSHOT_STALE_S`` (the database has not
answered)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from privlm.service.db import Job, now

REFRESH_S = 2.0
SNAPSHOT_STALE_S = 30.0
STUCK_S = 120.0
HEARTBEAT_STALE_S = 30.0  # the worker's STALE_SECONDS


def queue_numbers(s: Session) -> dict[str, Any]:
    """Jobs queued and running, running jobs whose worker stopped beating, and how long the
    oldest queued job has waited (every tenant together: counts of jobs, never of data)."""
    counts = dict(s.execute(select(Job.status, func.count()).group_by(Job.status)).all())
    stale_before = now() - timedelta(seconds=HEARTBEAT_STALE_S)
    stale = s.scalar(
        select(func.count()).where(Job.status == "running", Job.heartbeat_at < stale_before)
    )
    oldest = s.scalar(select(func.min(Job.created_at)).where(Job.status == "queued"))
    return {
        "queued": int(counts.get("queued", 0)),
        "running": int(counts.get("running", 0)),
        "stale_running": int(stale or 0),
        "oldest_queued_s": None if oldest is None else (now() - oldest).total_seconds(),
    }


@dataclass
class ServiceHealth:
    """The snapshot, refreshed every ``REFRESH_S`` by a daemon thread (started on first use)."""

    sessions: sessionmaker[Session]
    workers: Any = None  # a WorkerPool, or None: the workers run elsewhere (or in tests)
    _queue: dict[str, Any] | None = None
    _at: float = 0.0
    _error: str | None = None
    _started: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self) -> None:
        try:
            with self.sessions() as s:
                numbers = queue_numbers(s)
            self._queue, self._at, self._error = numbers, time.monotonic(), None
        except Exception as exc:  # the database is down or locked: reported, never raised
            self._error = type(exc).__name__

    def _run(self) -> None:
        while True:
            self.refresh()
            time.sleep(REFRESH_S)

    def _ensure_started(self) -> None:
        with self._lock:
            if not self._started:
                self._started = True
                threading.Thread(target=self._run, name="privlm-health", daemon=True).start()

    def report(self) -> dict[str, Any]:
        """``status`` (ok or degraded), ``problems``, ``workers`` and ``queue``."""
        self._ensure_started()
        problems: list[str] = []
        workers = None if self.workers is None else self.workers.describe()
        if workers is not None:
            if workers["alive"] < workers["expected"]:
                problems.append(f"{workers['expected'] - workers['alive']} job worker(s) down")
            if workers["gave_up"]:
                problems.append("a job worker kept dying and is not started again")
        queue = self._queue
        age = None if not self._at else time.monotonic() - self._at
        if queue is None or age is None:
            if self._error:
                problems.append(f"the database did not answer ({self._error})")
        else:
            if age > SNAPSHOT_STALE_S:
                problems.append(f"the database has not answered for {age:.0f} s")
            if queue["stale_running"]:
                problems.append(f"{queue['stale_running']} running job(s) without a heartbeat")
            waited = queue["oldest_queued_s"]
            if queue["queued"] and not queue["running"] and waited and waited > STUCK_S:
                problems.append(f"jobs have waited {waited:.0f} s with none running")
        return {
            "status": "degraded" if problems else "ok",
            "problems": problems,
            "workers": workers,
            "queue": None if queue is None else {**queue, "age_s": age},
        }

    def metrics(self) -> str:
        """The same numbers in Prometheus' text format."""
        r = self.report()
        lines = [f"privlm_up {1 if r['status'] == 'ok' else 0}"]
        for k, v in (r["workers"] or {}).items():
            lines.append(f"privlm_workers_{k} {int(v)}")
        for k, v in (r["queue"] or {}).items():
            if v is not None:
                lines.append(f"privlm_jobs_{k} {float(v):g}")
        return "\n".join(lines) + "\n"
