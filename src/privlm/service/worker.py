"""The job worker: a separate process that claims queued jobs and runs them.

Durability: the job row is the truth. A running job carries its worker's pid,
host and a heartbeat. When a worker starts (and every minute after) it looks for running jobs
whose worker is gone (pid dead on this host, or heartbeat older than ``STALE_SECONDS``):
such a job is put back in the queue to resume (an ensemble resumes from its finished
adapters, synth from its written texts; DP-SGD, JFT, PromptDPSGD and PromptPATE restart:
nothing was released, and each charge the job recorded is found by its step and not made
again, so a restart never pays twice; ``privlm.accounting.budgeted``), or, after
``MAX_ATTEMPTS`` interruptions, marked failed with the reason. No job is silently lost.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from privlm.errors import PrivlmError
from privlm.progress import watch
from privlm.service.db import Dataset, Job, ledger_url, make_engine, now, session_factory
from privlm.service.job_kinds import job_kind, stored_params
from privlm.service.job_params import PateParams
from privlm.service.job_queue import next_job
from privlm.service.job_runners import (
    JobCancelled,
    JobContext,
    add_event,
    dataset_ledger,
    job_epsilon,
)
from privlm.service.job_views import scrub, server_roots
from privlm.service.storage import job_dir

T = TypeVar("T")

MAX_ATTEMPTS = 3
STALE_SECONDS = 30.0
HEARTBEAT_SECONDS = 2.0
PROGRESS_EVERY = 0.5


BUSY_BACKOFF = (0.25, 0.5, 1.0, 2.0, 4.0, 8.0)  # seconds between tries; then 8 s each
BUSY_GIVE_UP_S = 600.0  # a database busy this long is down, not busy


def is_busy(exc: BaseException) -> bool:
    """A database that is busy (SQLite's lock, PostgreSQL's lock timeout), not broken."""
    text = str(exc).lower()
    return isinstance(exc, OperationalError) and any(
        w in text for w in ("locked", "busy", "lock timeout", "could not obtain lock")
    )


def retrying_busy(work: Callable[[], T], what: str, waited: list[float] | None = None) -> T:
    """``work()``, tried again with back-off while the database is busy: a long write of
    another request (an upload's commit) delays a worker, never kills it. ``waited``
    collects the seconds spent waiting (for the job's events)."""
    start, tries = time.monotonic(), 0
    while True:
        try:
            return work()
        except OperationalError as exc:
            elapsed = time.monotonic() - start
            if not is_busy(exc) or elapsed > BUSY_GIVE_UP_S:
                raise
            pause = BUSY_BACKOFF[min(tries, len(BUSY_BACKOFF) - 1)]
            print(f"worker: the database is busy ({what}); retrying in {pause:g} s",
                  file=sys.stderr)  # fmt: skip
            time.sleep(pause)
            tries += 1
            if waited is not None:
                waited.append(pause)


def _pid_alive(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Worker:
    def __init__(
        self, db_url: str, root: Path, model: str, poll: float = 1.0, tenant_cap: int = 1
    ) -> None:
        self.db_url, self.root, self.model, self.poll = db_url, Path(root), model, poll
        self.tenant_cap = tenant_cap  # a tenant's jobs running at once (privlm.service.job_queue)
        self.ledger_url = ledger_url(db_url, self.root)
        self.engine = make_engine(db_url)
        self.sessions: sessionmaker[Session] = session_factory(self.engine)
        self.pid, self.host = os.getpid(), socket.gethostname()

    # -- recovery -----------------------------------------------------------------------------

    def _gone(self, job: Job) -> str | None:
        """Why ``job``'s worker is gone, or None if it may still be running it."""
        if job.worker_pid == self.pid and job.worker_host == self.host:
            return None  # ours
        if job.worker_host == self.host and not _pid_alive(job.worker_pid):
            return f"worker process {job.worker_pid} is gone"
        beat = job.heartbeat_at or job.started_at
        if beat is None or now() - beat > timedelta(seconds=STALE_SECONDS):
            return f"no heartbeat from worker {job.worker_pid}@{job.worker_host} for {STALE_SECONDS:.0f} s"
        return None

    def recover(self) -> list[str]:
        """Requeue or fail every running job whose worker is gone; returns their ids."""
        touched = []
        with self.sessions.begin() as s:
            for job in s.scalars(select(Job).where(Job.status == "running")):
                why = self._gone(job)
                if why is None:
                    continue
                touched.append(job.id)
                job.worker_pid = job.worker_host = None
                if job.cancel_requested:
                    job.status, job.finished_at = "cancelled", now()
                    add_event(job, f"cancelled (its worker is gone: {why})")
                elif job.attempts >= MAX_ATTEMPTS:
                    job.status, job.finished_at = "failed", now()
                    job.error = f"interrupted {job.attempts} times ({why}); giving up"
                    add_event(job, f"failed: {job.error}")
                else:
                    job.status = "queued"
                    how = job_kind(job.kind).resume
                    add_event(job, f"interrupted: {why}; requeued, {how}")
        return touched

    # -- running ------------------------------------------------------------------------------

    def claim(self) -> str | None:
        with self.sessions.begin() as s:  # BEGIN IMMEDIATE: workers claim one at a time
            job = next_job(s, self.tenant_cap)
            if job is None:
                return None
            done = s.execute(
                update(Job)
                .where(Job.id == job.id, Job.status == "queued")
                .values(
                    status="running",
                    worker_pid=self.pid,
                    worker_host=self.host,
                    attempts=Job.attempts + 1,
                    started_at=now(),
                    heartbeat_at=now(),
                )
            )
            if getattr(done, "rowcount", 0) != 1:  # another worker claimed it first
                return None
            return job.id

    def _heartbeat(self, job_id: str, stop: threading.Event) -> None:
        while not stop.wait(HEARTBEAT_SECONDS):
            try:
                with self.sessions.begin() as s:
                    s.execute(
                        update(Job)
                        .where(Job.id == job_id, Job.worker_pid == self.pid)
                        .values(heartbeat_at=now())
                    )
            except OperationalError as exc:  # busy: the next beat tries again
                if not is_busy(exc):
                    raise

    def _progress_listener(self, job_id: str, kind: str) -> Any:
        state: dict[str, Any] = {"last": 0.0, "outer": None}

        def listener(desc: str, done: int, total: int | None) -> None:
            if desc.endswith("ensemble"):
                state["outer"] = (done, total)
            t = time.monotonic()
            if t - state["last"] < PROGRESS_EVERY and not (total and done >= total):
                return
            state["last"] = t
            frac = done / total if total else 0.0
            percent = 100.0 * frac
            if kind == "ensemble" and state["outer"] and state["outer"][1]:
                o_done, o_total = state["outer"]
                inner = 0.0 if desc.endswith("ensemble") else frac
                percent = 100.0 * min(1.0, (o_done + inner) / o_total)
            try:
                with self.sessions.begin() as s:
                    s.execute(
                        update(Job)
                        .where(Job.id == job_id)
                        .values(
                            stage=desc[:80], steps_done=done, steps_total=total, percent=percent
                        )
                    )
                    cancelled = s.scalar(select(Job.cancel_requested).where(Job.id == job_id))
            except OperationalError as exc:  # busy: progress is shown at the next step
                if not is_busy(exc):
                    raise
                state["last"] = t + 2.0  # and not asked again for a while
                return
            if cancelled:
                raise JobCancelled(f"job {job_id} was cancelled")  # stops at this step

        return listener

    def _started(self, job_id: str) -> tuple[Job, Dataset | None, Dataset | None, Any, Any]:
        with self.sessions.begin() as s:
            job = s.get(Job, job_id)
            assert job is not None
            ds = s.get(Dataset, job.dataset_id)
            stored = stored_params(job)
            pub = stored.params.public_dataset_id if isinstance(stored.params, PateParams) else None
            public = s.get(Dataset, pub) if pub else None
            add_event(job, f"started (attempt {job.attempts})")
        return job, ds, public, stored, pub

    def run(self, job_id: str) -> None:
        job, ds, public, stored, pub = retrying_busy(
            lambda: self._started(job_id), f"starting job {job_id}"
        )
        out = job_dir(self.root, job.tenant_id, job.id) / "output"
        stop = threading.Event()
        beat = threading.Thread(target=self._heartbeat, args=(job_id, stop), daemon=True)
        beat.start()
        try:
            needed = (ds, public) if pub else (ds,)
            gone = any(d is None or d.deleted_at is not None for d in needed)
            if ds is None or gone or (public is not None and public.tenant_id != job.tenant_id):
                raise PrivlmError("a dataset of this job was deleted before it ran")
            out.parent.mkdir(parents=True, exist_ok=True)
            ctx = JobContext(job, ds, public, out, self.ledger_url, stored.model or self.model)
            with watch(self._progress_listener(job_id, job.kind)):
                result = job_kind(job.kind).run(ctx)
            status, error = "succeeded", None
        except JobCancelled:
            status, error, result = "cancelled", None, {}
            shutil.rmtree(out.parent, ignore_errors=True)  # no artefact, partial or whole
        except PrivlmError as exc:
            status, error, result = "failed", str(exc), {}
        except Exception as exc:  # a bug: keep the type, not a message that may quote data
            print(
                f"job {job_id} failed with {type(exc).__name__} (message withheld: it may quote "
                "data)\n" + "".join(traceback.format_tb(exc.__traceback__)),
                file=sys.stderr,
            )
            status, error, result = "failed", f"internal error ({type(exc).__name__})", {}
        finally:
            stop.set()
        if status == "succeeded":  # kept before the end is recorded: a succeeded job has it
            (out.parent / "result.json").write_text(json.dumps(result, indent=2, default=str))
        waited: list[float] = []
        retrying_busy(lambda: self._finish(job_id, ds, out, status, error, result, waited),
                      f"recording job {job_id}'s end", waited)  # fmt: skip

    def _finish(
        self, job_id: str, ds: Dataset | None, out: Path, status: str, error: str | None,
        result: dict[str, Any], waited: list[float],
    ) -> None:  # fmt: skip
        """Record a job's end (one transaction; retried whole while the database is busy)."""
        with self.sessions.begin() as s:
            job = s.get(Job, job_id)
            assert job is not None
            error = None if error is None else scrub(error, server_roots(self.root))
            if waited:
                add_event(
                    job, f"the database was busy: its end was recorded {sum(waited):g} s late"
                )
            job.status, job.error, job.finished_at = status, error, now()
            job.worker_pid = None
            if status == "succeeded":
                job.percent = 100.0
                job.output_dir = str(out)
            if ds is not None and job.kind != "ensemble":
                spent = result.get("epsilon_spent")
                if spent is None:  # failed or cancelled: what this job had charged
                    spent = job_epsilon(dataset_ledger(self.ledger_url, ds), job.id)
                job.epsilon_spent = spent
            add_event(job, status if error is None else f"{status}: {error}")

    def loop(self, once: bool = False, stop: threading.Event | None = None) -> int:
        """Run jobs until ``stop`` is set (or, with ``once``, until the queue is empty)."""
        ran = 0
        retrying_busy(self.recover, "recovering interrupted jobs")
        last_recover = time.monotonic()
        while stop is None or not stop.is_set():
            if time.monotonic() - last_recover > 60:
                retrying_busy(self.recover, "recovering interrupted jobs")
                last_recover = time.monotonic()
            job_id = retrying_busy(self.claim, "claiming a job")
            if job_id is None:
                if once:
                    return ran
                time.sleep(self.poll)
                continue
            self.run(job_id)
            ran += 1
        return ran


def run_worker(
    db_url: str, root: Path, model: str, die_with_parent: bool = False, tenant_cap: int = 1,
    threads: int | None = None,
) -> None:  # fmt: skip
    """Entry point of ``privlm service worker``; ``threads``: torch's, when several workers
    share the machine's cores."""
    if die_with_parent:
        _die_with_parent()
    if threads:
        import torch

        torch.set_num_threads(threads)
    Worker(db_url, root, model, tenant_cap=tenant_cap).loop()


def _die_with_parent() -> None:
    """On Linux, ask the kernel to SIGKILL this process when its parent (the server) dies,
    so a killed server never leaves an orphan worker holding a job."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
