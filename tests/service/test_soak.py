"""A soak test of the door: one tenant uploads a file at the size limit with 10^6 lines
while another tenant probes the service and runs a job. Before, the upload was parsed on
the event loop inside a transaction holding SQLite's write lock: /health took 113 s and
both job workers died on "database is locked". The probes' p95 must stay under 2 s (or
under 10 times the same probes' p95 before the upload, on a machine that is busy anyway)
and the job must finish. The same on PostgreSQL."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from tests.service.live import LiveServer, wait_for_job

LIMIT_MB = 20
PATHS = ("/v1/health", "/v1/datasets")


def probe(c: httpx.Client, until: threading.Event | float) -> list[float]:
    """Latencies of the probes, until the event is set or the deadline passes."""
    seen: list[float] = []
    while not (until.is_set() if isinstance(until, threading.Event) else time.monotonic() > until):
        for path in PATHS:
            t = time.perf_counter()
            assert c.get(path).status_code == 200
            seen.append(time.perf_counter() - t)
        time.sleep(0.1)
    return seen


def p95(seen: list[float]) -> float:
    assert seen, "no probe was answered"
    ranked = sorted(seen)
    return ranked[int(0.95 * (len(ranked) - 1))]


@pytest.fixture(params=["sqlite", "postgresql"])
def soak(request, tmp_path_factory):
    """The server on SQLite (the default) or on a throwaway PostgreSQL cluster."""
    db = request.getfixturevalue("pg").database("soak") if request.param == "postgresql" else None
    srv = LiveServer(
        tmp_path_factory.mktemp("soak"), extra=("--max-upload-mb", str(LIMIT_MB)), db=db
    ).start()
    yield srv
    srv.stop()


def test_an_upload_at_the_limit_stalls_neither_another_tenant_nor_a_job(soak):
    big_key, other_key = soak.tenant("big"), soak.tenant("other")
    lines = "\n".join(f"l{i:07d} soak rows" for i in range(10**6)).encode()
    assert (LIMIT_MB - 2) << 20 < len(lines) < LIMIT_MB << 20
    with soak.client(other_key, timeout=60) as c:
        baseline = probe(c, time.monotonic() + 3)
        small = "\n".join(f"note {i} about the fox {i % 7}" for i in range(60))
        ds = c.post("/v1/datasets", files={"file": ("s.txt", small.encode())}).json()["id"]
        answer: dict[str, object] = {}
        done = threading.Event()

        def upload() -> None:
            with soak.client(big_key, timeout=600) as b:
                r = b.post("/v1/datasets", files={"file": ("big.txt", lines)})
                answer["status"], answer["body"] = r.status_code, r.text[:300]
            done.set()

        uploader = threading.Thread(target=upload)
        uploader.start()
        time.sleep(0.5)
        job = c.post("/v1/jobs", json={"kind": "ensemble", "dataset_id": ds,
                                       "params": {"parts": 2, "block_size": 16, "max_blocks": 2}})  # fmt: skip
        assert job.status_code == 201, job.text
        try:
            during = probe(c, done)
        except httpx.TransportError as exc:  # name what the server said, for the next look
            pytest.fail(f"a probe failed: {exc!r}; the server's log ends:\n"
                        f"{soak.log.read_text()[-3000:]}")  # fmt: skip
        uploader.join()
        assert answer["status"] == 201, answer
        finished = wait_for_job(c, job.json()["id"], timeout=600)
        assert finished["status"] == "succeeded", finished
        health = c.get("/v1/health").json()
    bound = max(2.0, 10 * p95(baseline))
    assert p95(during) < bound, (p95(during), bound, max(during), len(during))
    assert health["status"] == "ok", health
    assert health["workers"]["alive"] == health["workers"]["expected"] == 2
    assert "database is locked" not in soak.log.read_text()
