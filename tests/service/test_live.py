"""The service as a real process on loopback: 50 concurrent clients against a small budget,
and SIGKILL mid-generation and mid-job."""

from __future__ import annotations

import http.client
import itertools
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from privlm.accounting import PrivacyLedger
from tests.service.live import LiveServer, wait_for_job

LINES = "\n".join(
    f"record {i}: the quick brown fox {i % 7} jumps over the lazy dog {i % 5}" for i in range(300)
)


def ledger(server: LiveServer, name: str) -> PrivacyLedger:
    return PrivacyLedger(f"sqlite:///{server.data_dir / 'privacy-ledgers.db'}", name)


UPLOADS = itertools.count()


def upload(c: httpx.Client, text: str = LINES) -> str:
    # the module's deployments all reserve on this one dataset: room for several at ε = 8.
    # Each upload gets one line of its own: the same records twice are refused (one budget)
    text = f"{text}\nupload number {next(UPLOADS)}"
    r = c.post(
        "/v1/datasets", files={"file": ("d.txt", text.encode())}, data={"budget_epsilon": "100"}
    )
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def ensemble(c: httpx.Client, ds: str, **params) -> dict:
    r = c.post("/v1/jobs", json={"kind": "ensemble", "dataset_id": ds, "params": params})
    assert r.status_code == 201, r.text
    return dict(r.json())


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    srv = LiveServer(tmp_path_factory.mktemp("live-svc")).start()
    key = srv.tenant("acme")
    with srv.client(key) as c:
        job = ensemble(c, upload(c), parts=2, block_size=16, max_blocks=2)
        done = wait_for_job(c, job["id"])
        assert done["status"] == "succeeded", done
    yield srv, key, done["id"]
    srv.stop()


def test_fifty_concurrent_clients_never_exceed_the_budget(live):
    srv, key, job_id = live
    with srv.client(key) as c:
        r = c.post(
            "/v1/deployments",
            json={"job_id": job_id, "mechanism": "pmixed", "epsilon": 8, "queries": 40},
        )
        dep = r.json()["id"]
    returned: list[int] = []
    statuses: list[int] = []
    lock = threading.Lock()

    def client(_: int) -> None:
        with srv.client(key) as c:
            for _ in range(10):
                r = c.post(
                    "/v1/completions", json={"model": dep, "prompt": "the fox", "max_tokens": 3}
                )
                while r.status_code == 429 and r.json()["error"]["type"] == "rate_limited":
                    assert r.headers["Retry-After"] == "1"  # over the tenant's cap: retry
                    time.sleep(0.1)
                    r = c.post(
                        "/v1/completions",
                        json={"model": dep, "prompt": "the fox", "max_tokens": 3},
                    )
                with lock:
                    statuses.append(r.status_code)
                if r.status_code == 429:
                    assert r.json()["error"]["type"] == "budget_exhausted"
                    return
                assert r.status_code == 200, r.text
                with lock:
                    returned.append(r.json()["usage"]["completion_tokens"])

    with ThreadPoolExecutor(50) as pool:
        list(pool.map(client, range(50)))
    led = ledger(srv, f"deployment-{dep}")
    assert set(statuses) <= {200, 429} and 429 in statuses
    assert led.count() == sum(returned) == 40  # every returned token charged, none more
    assert led.spent().epsilon <= 8.0
    assert led.verify()
    with srv.client(key) as c:
        b = c.get(f"/v1/deployments/{dep}/budget").json()
    assert b["queries"] == {"used": 40, "total": 40, "left": 0} and b["exhausted"]


def test_one_tenant_flooding_a_deployment_does_not_stall_another(live):
    """45 concurrent completions from one tenant; another tenant's listing and
    the health check are answered promptly throughout, and the flood past the tenant's cap
    is refused at once with Retry-After."""
    srv, key, job_id = live
    other = srv.tenant("globex")
    with srv.client(key) as c:
        dep = c.post(
            "/v1/deployments",
            json={"job_id": job_id, "mechanism": "pmixed", "epsilon": 8, "queries": 100000},
        ).json()["id"]
    flood_done = threading.Event()
    statuses: list[int] = []

    def flood(_: int) -> None:
        with srv.client(key) as c:
            r = c.post(
                "/v1/completions", json={"model": dep, "prompt": "the fox", "max_tokens": 12}
            )
            statuses.append(r.status_code)
            if r.status_code == 429:
                assert r.json()["error"]["type"] == "rate_limited"
                assert r.headers["Retry-After"]

    latencies: dict[str, list[float]] = {"/v1/health": [], "/v1/datasets": []}
    baseline: dict[str, list[float]] = {"/v1/health": [], "/v1/datasets": []}

    def probe(into: dict[str, list[float]], until: threading.Event | float) -> None:
        def over() -> bool:
            return (
                until.is_set() if isinstance(until, threading.Event) else time.monotonic() > until
            )

        with srv.client(other, timeout=30) as c:
            while not over():
                for path, seen in into.items():
                    t = time.perf_counter()
                    assert c.get(path).status_code == 200
                    seen.append(time.perf_counter() - t)
                time.sleep(0.05)

    probe(baseline, time.monotonic() + 2)  # the same probes on the same machine, unloaded
    prober = threading.Thread(target=probe, args=(latencies, flood_done))
    prober.start()
    with ThreadPoolExecutor(45) as pool:
        list(pool.map(flood, range(45)))
    flood_done.set()
    prober.join()
    assert set(statuses) <= {200, 429} and statuses.count(200) >= 32
    assert all(latencies.values())
    for path, seen in latencies.items():
        # a stalled event loop holds every probe for the flood's generation time; one slow
        # probe on a busy 2-core machine is not a stall (bench_service measures the p99)
        # measured against the same probes before the flood: a machine busy with other work
        # slows both, while a stalled loop holds every probe for the flood's generation time
        ranked, before = sorted(seen), sorted(baseline[path])
        p95 = ranked[int(0.95 * (len(ranked) - 1))]
        bound = max(2.0, 10 * before[int(0.95 * (len(before) - 1))])
        assert p95 < bound and ranked[-1] < 5 * bound, (path, p95, bound, ranked[-1], len(ranked))


def test_a_connection_idle_past_a_client_pools_expiry_is_still_answered(live):
    """A pooled client (httpx keeps a connection 5 s) reuses one the server must not be
    closing: with uvicorn's 5 s default the two raced, and the client's next request on a
    loaded machine was answered with a TCP reset. The same socket is answered after 6 s."""
    srv, _, _ = live
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
    try:
        conn.request("GET", "/v1/health")
        first = conn.getresponse()
        first.read()
        assert first.status == 200 and not first.will_close
        sock = conn.sock
        time.sleep(6)
        conn.request("GET", "/v1/health")
        again = conn.getresponse()
        again.read()
        assert again.status == 200 and conn.sock is sock  # not a new connection
    finally:
        conn.close()


def test_sigkill_mid_generation_leaves_a_consistent_ledger(live):
    srv, key, job_id = live
    with srv.client(key) as c:
        dep = c.post(
            "/v1/deployments",
            json={"job_id": job_id, "mechanism": "pmixed", "epsilon": 8, "queries": 100000},
        ).json()["id"]
        first = c.post("/v1/completions", json={"model": dep, "prompt": "a", "max_tokens": 5})
        received = first.json()["usage"]["completion_tokens"]
    errors: list[Exception] = []

    def long_request() -> None:
        try:
            with srv.client(key) as c:
                c.post("/v1/completions", json={"model": dep, "prompt": "b", "max_tokens": 256})
        except httpx.HTTPError as exc:
            errors.append(exc)

    t = threading.Thread(target=long_request)
    t.start()
    led = ledger(srv, f"deployment-{dep}")
    deadline = time.monotonic() + 60
    while led.count() < received + 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    srv.kill()  # mid-generation: tokens charged, response never sent
    t.join(timeout=60)
    assert errors, "the in-flight request should have failed with the server"
    charged = led.count()
    assert charged > received  # the killed request's tokens were charged before release
    assert led.verify()  # totals equal the sum of the recorded charges
    srv.start()
    with srv.client(key) as c:
        r = c.post("/v1/completions", json={"model": dep, "prompt": "c", "max_tokens": 2})
        assert r.status_code == 200
        b = c.get(f"/v1/deployments/{dep}/budget").json()
    assert b["queries"]["used"] == charged + r.json()["usage"]["completion_tokens"]
    assert ledger(srv, f"deployment-{dep}").verify()


def test_sigkill_mid_job_resumes_it(live):
    srv, key, _ = live
    with srv.client(key) as c:
        job = ensemble(c, upload(c), parts=4, block_size=32, max_blocks=20, epochs=2)
        deadline = time.monotonic() + 300
        manifest = None
        while time.monotonic() < deadline:
            j = c.get(f"/v1/jobs/{job['id']}").json()
            assert j["status"] in ("queued", "running"), j
            manifest = next(
                (srv.data_dir / "tenants").rglob(f"{job['id']}/output/manifest.json"), None
            )
            if manifest is not None and json.loads(manifest.read_text())["adapters"]:
                break
            time.sleep(0.05)
    assert manifest is not None, "the job never started"
    before = json.loads(manifest.read_text())["adapters"]
    assert before and j["progress"]["percent"] < 100
    srv.kill()  # the worker dies with the server (PR_SET_PDEATHSIG)
    srv.start()
    with srv.client(key) as c:
        done = wait_for_job(c, job["id"], timeout=600)
    assert done["status"] == "succeeded", done
    assert done["attempts"] == 2
    assert any("interrupted" in e["what"] for e in done["events"])
    after = json.loads(manifest.read_text())["adapters"]
    for name, stats in before.items():  # finished adapters were kept, not retrained
        assert after[name] == stats


def test_no_private_text_in_the_logs(live):
    srv, _, _ = live
    log = srv.log.read_text()
    assert "POST /v1/completions" in log  # the access log is there
    for private in ("quick brown fox", "lazy dog", "the fox"):
        assert private not in log
