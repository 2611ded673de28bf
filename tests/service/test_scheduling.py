"""Generation off the request threads: batching across requests, bounded
queues, per-tenant caps, deadlines, prompt limits in tokens, health never waiting."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise

import pytest

from privlm.accounting import PrivacyLedger
from privlm.predict.batching import DecodeBatch
from privlm.predict.engine import Prefill
from privlm.service.admission import Overloaded, SchedulerLimits, TenantGate
from tests.service.conftest import complete, deploy


def limit(service, **kw) -> None:
    """Scheduling limits for deployments loaded from now on."""
    runtime = service.state.runtime
    runtime.limits = SchedulerLimits(**kw)
    runtime.gate = TenantGate(runtime.limits.tenant_max, runtime.limits.max_queue)


def pmixed(service, job, queries=400) -> str:
    r = deploy(service, "acme", job["id"], mechanism="pmixed", epsilon=8, queries=queries)
    assert r.status_code == 201, r.text
    dep = r.json()["id"]
    assert complete(service, "acme", dep, max_tokens=1).status_code == 200  # loads it
    return dep


def model_lock(service, dep):
    """The base model's lock: held, every forward pass on it waits."""
    return service.state.runtime._loaded[dep].scheduler.batch.engine.router.lock


def wait_until(predicate, timeout=30.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)


def test_concurrent_requests_share_forward_passes_and_are_all_charged(service, ensemble_job):
    dep = pmixed(service, ensemble_job)
    sched = service.state.runtime._loaded[dep].scheduler
    sizes: list[int] = []
    step = sched.batch.step

    def recording_step() -> None:
        sizes.append(len(sched.batch))
        step()

    sched.batch.step = recording_step
    lock = model_lock(service, dep)
    with ThreadPoolExecutor(6) as pool:
        with lock:  # six requests queue up while the model is busy
            futures = [pool.submit(complete, service, "acme", dep, 6) for _ in range(6)]
            wait_until(lambda: sched.load()["queued"] + sched.load()["running"] >= 5)
        responses = [f.result() for f in futures]
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses]
    assert max(sizes) >= 5  # decoded together
    ledger = PrivacyLedger(service.ledgers, f"deployment-{dep}")
    released = sum(r.json()["usage"]["completion_tokens"] for r in responses)
    assert ledger.count() == released + 1  # + the loading request's token
    queries = [e.params["query"] for e in ledger.charges()]
    assert queries == list(range(1, released + 2))  # one charge per token, in order


def test_a_full_service_is_refused_at_once_with_retry_after(service, ensemble_job):
    """The service's bound counts every completion queued or running, across tenants."""
    limit(service, max_batch=1, max_queue=2)
    dep = pmixed(service, ensemble_job)
    gate = service.state.runtime.gate
    with ThreadPoolExecutor(2) as pool, model_lock(service, dep):
        held = [pool.submit(complete, service, "acme", dep, 2) for _ in range(2)]
        wait_until(lambda: gate.in_flight(held_tenant(service)) == 2)
        t = time.monotonic()
        r = complete(service, "acme", dep, 2)
        assert time.monotonic() - t < 5
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
        assert r.json()["error"]["type"] == "overloaded" and "its bound is 2" in r.text
    assert [h.result().status_code for h in held] == [200, 200]


def test_a_tenant_over_its_cap_gets_429_and_another_tenant_is_answered(service, ensemble_job):
    limit(service, tenant_max=2)
    dep = pmixed(service, ensemble_job)
    sched = service.state.runtime._loaded[dep].scheduler
    with ThreadPoolExecutor(2) as pool:
        with model_lock(service, dep):
            held = [pool.submit(complete, service, "acme", dep, 2) for _ in range(2)]
            wait_until(lambda: service.state.runtime.gate.in_flight(held_tenant(service)) == 2)
            r = complete(service, "acme", dep, 2)
            assert r.status_code == 429 and r.headers["Retry-After"] == "1"
            assert r.json()["error"]["type"] == "rate_limited" and "cap is 2" in r.text
            for path in ("/v1/health", "/v1/datasets"):  # while acme's generation waits
                t = time.monotonic()
                other = service.client.get(path, headers=service.auth("globex"))
                assert other.status_code == 200 and time.monotonic() - t < 2.0
        assert all(f.result().status_code == 200 for f in held)
    # the last token is sent before its slot leaves the batch: released soon, not at once
    wait_until(lambda: sched.load() == {"running": 0, "queued": 0})
    wait_until(lambda: service.state.runtime.gate.in_flight(held_tenant(service)) == 0)


def held_tenant(service) -> str:
    from sqlalchemy import select

    from privlm.service.db import Tenant

    with service.state.sessions.begin() as s:
        return str(s.scalar(select(Tenant.id).where(Tenant.name == "acme")))


def test_a_request_past_its_deadline_releases_the_deployment(service, ensemble_job):
    limit(service, deadline_s=0.5)
    dep = pmixed(service, ensemble_job)
    with ThreadPoolExecutor(1) as pool:
        with model_lock(service, dep):
            waiting = pool.submit(complete, service, "acme", dep, 8)
            time.sleep(1.0)
        r = waiting.result()
    assert r.status_code == 503 and r.json()["error"]["type"] == "timeout"
    assert complete(service, "acme", dep, 2).status_code == 200  # nothing left holding it


def test_a_prompt_longer_than_the_context_allows_is_refused_in_tokens(service, ensemble_job):
    dep = pmixed(service, ensemble_job)
    r = complete(service, "acme", dep, 16, prompt="word " * 2500)  # tiny model: 2,048 tokens
    assert r.status_code == 400
    assert "this deployment's model takes 2,048 tokens in all" in r.json()["error"]["message"]
    assert "at most 2,032" in r.json()["error"]["message"]
    r = complete(service, "acme", dep, 16, prompt="word " * 2000)
    assert r.status_code == 200, r.text


def test_a_client_that_goes_away_stops_its_completion(service, ensemble_job):
    dep = pmixed(service, ensemble_job)
    ledger = PrivacyLedger(service.ledgers, f"deployment-{dep}")
    before = ledger.count()
    with service.client.stream(
        "POST", "/v1/completions", headers=service.auth("acme"),
        json={"model": dep, "prompt": "the patient", "max_tokens": 200, "stream": True},
    ) as r:  # fmt: skip
        assert r.status_code == 200
        next(r.iter_lines())
    sched = service.state.runtime._loaded[dep].scheduler
    wait_until(lambda: sched.load() == {"running": 0, "queued": 0})
    assert ledger.count() - before < 200


@pytest.mark.fast
def test_both_refusals_are_reached_at_the_default_settings():
    """At the defaults a tenant's 33rd completion gets 429, and with two tenants at their
    cap (64 in flight) a third tenant's first gets 503: the service bound is not dead."""
    limits = SchedulerLimits()
    gate = TenantGate(limits.tenant_max, limits.max_queue)
    for _ in range(limits.tenant_max):
        gate.enter("a")
    with pytest.raises(Overloaded) as own:
        gate.enter("a")
    assert own.value.status == 429
    for _ in range(limits.tenant_max):
        gate.enter("b")
    with pytest.raises(Overloaded) as full:
        gate.enter("c")
    assert full.value.status == 503 and "bound is 64" in full.value.message
    gate.leave("a")
    gate.enter("c")  # one finished: the third tenant is answered


@pytest.mark.fast
def test_tenant_gate_counts_and_caps():
    gate = TenantGate(2)
    gate.enter("a")
    gate.enter("a")
    gate.enter("b")
    with pytest.raises(Exception, match="cap is 2"):
        gate.enter("a")
    gate.leave("a")
    gate.enter("a")
    assert gate.in_flight("a") == 2 and gate.in_flight("b") == 1


def test_health_answers_while_a_deployment_generates(service, ensemble_job):
    dep = pmixed(service, ensemble_job)
    stop = threading.Event()
    worst = 0.0

    def probe() -> None:
        nonlocal worst
        while not stop.is_set():
            t = time.monotonic()
            assert service.client.get("/v1/health").status_code == 200
            worst = max(worst, time.monotonic() - t)
            time.sleep(0.02)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            rs = list(pool.map(lambda _: complete(service, "acme", dep, 8), range(8)))
    finally:
        stop.set()
        prober.join()
    assert all(r.status_code == 200 for r in rs)
    assert worst < 1.0  # in-process on a 2-core CI machine; bench_service measures < 100 ms


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_stop_strings_work_through_the_scheduler(service, ensemble_job, path):
    """``stop`` is honoured, never ignored (post-processing: no privacy cost)."""
    dep = pmixed(service, ensemble_job)
    stops = [" ", "e", "a", "t"]  # 32 random tokens almost surely hold one
    body = {"model": dep, "max_tokens": 32, "stop": stops}
    if path.endswith("chat/completions"):
        body["messages"] = [{"role": "user", "content": "the patient"}]
    else:
        body["prompt"] = "the patient"
    r = service.client.post(path, headers=service.auth("acme"), json=body)
    if r.status_code == 400:  # the tiny model's tokenizer may lack a chat template
        assert "chat template" in r.json()["error"]["message"]
        return
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    text = choice.get("text", (choice.get("message") or {}).get("content", ""))
    assert choice["finish_reason"] == "stop"
    assert not any(s in text for s in stops)


def test_a_failed_forward_pass_fails_its_completions_and_the_scheduler_goes_on(
    service, ensemble_job
):
    dep = pmixed(service, ensemble_job)
    sched = service.state.runtime._loaded[dep].scheduler
    step = type(sched.batch).step

    def broken(self):
        raise RuntimeError("device lost")

    type(sched.batch).step = broken
    try:
        r = complete(service, "acme", dep, 4)
    finally:
        type(sched.batch).step = step
    assert r.status_code == 500 and r.json()["error"] == {
        "type": "internal_error",
        "message": "RuntimeError",
    }  # the type only, never a message
    assert complete(service, "acme", dep, 2).status_code == 200
    wait_until(lambda: service.state.runtime.gate.in_flight(held_tenant(service)) == 0)


def trace(monkeypatch, slow_prefill: float = 0.0) -> list[tuple[str, int]]:
    """Every prefill pass ("prefill", prompt length) and decoding step ("step", completions
    in the batch) in order, prefill passes slowed by ``slow_prefill`` seconds."""
    log: list[tuple[str, int]] = []
    advance, step = Prefill.advance, DecodeBatch.step

    def logged_advance(self, tokens):
        time.sleep(slow_prefill)
        log.append(("prefill", len(self.prompt)))
        return advance(self, tokens)

    def logged_step(self):
        log.append(("step", len(self)))
        step(self)

    monkeypatch.setattr(Prefill, "advance", logged_advance)
    monkeypatch.setattr(DecodeBatch, "step", logged_step)
    return log


def test_a_long_prompt_is_prefilled_between_the_running_completions_steps(
    service, ensemble_job, monkeypatch
):
    """With 16 prompt tokens per step, a prompt of about 300 tokens takes some 19 prefill
    passes, and the completion already running gets a decoding step after each of them."""
    limit(service, prefill_chunk=16)
    dep = pmixed(service, ensemble_job)
    log = trace(monkeypatch)
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(complete, service, "acme", dep, 120)
        wait_until(lambda: ("step", 1) in log)
        long = pool.submit(complete, service, "acme", dep, 1, prompt="word " * 300)
        assert long.result().status_code == 200, long.result().text
        assert running.result().status_code == 200
    length = long.result().json()["usage"]["prompt_tokens"]
    chunks = [i for i, e in enumerate(log) if e == ("prefill", length)]
    assert len(chunks) == -(-length // 16) >= 18
    between = [log[a + 1 : b] for a, b in pairwise(chunks)]
    assert all(len(e) == 1 and e[0][0] == "step" for e in between), between  # one step each
    if running.result().json()["choices"][0]["finish_reason"] == "length":  # 120 tokens:
        assert all(e == [("step", 1)] for e in between)  # it was decoded at every one


def test_a_prompt_still_prefilling_at_its_deadline_times_out_between_chunks(
    service, ensemble_job, monkeypatch
):
    limit(service, prefill_chunk=16, deadline_s=1.0)
    dep = pmixed(service, ensemble_job)
    log = trace(monkeypatch, slow_prefill=0.05)  # 2,000 tokens: 125 passes, over 6 s
    t = time.monotonic()
    r = complete(service, "acme", dep, 4, prompt="word " * 1990)
    assert r.status_code == 503 and r.json()["error"]["type"] == "timeout", r.text
    assert time.monotonic() - t < 3.0
    assert 5 < sum(e[0] == "prefill" for e in log) < 60
    assert complete(service, "acme", dep, 2).status_code == 200  # the deployment is free


@pytest.mark.fast
def test_privlm_serve_passes_every_scheduling_option_by_name(tmp_path, monkeypatch):
    import uvicorn
    from typer.testing import CliRunner

    import privlm.service.app as service_app
    from privlm.cli import app
    from privlm.models.placement import DEVICE_ENV, DTYPE_ENV

    for name in (DEVICE_ENV, DTYPE_ENV):  # serve sets them for its worker; restored after
        monkeypatch.setenv(name, "")
    seen = {}
    monkeypatch.setattr(
        service_app, "asgi_app", lambda settings, pool=None: seen.setdefault("s", settings)
    )
    monkeypatch.setattr(uvicorn, "run", lambda *a, **kw: None)
    monkeypatch.setattr("privlm.cli.serve._log_access", lambda: None)  # leaves logging alone
    args = ["--max-batch", "3", "--max-queue", "5", "--tenant-max", "2",
            "--prefill-chunk", "64", "--deadline", "9"]  # fmt: skip
    result = CliRunner().invoke(
        app, ["serve", "--no-worker", "--device", "cpu", "--data-dir", str(tmp_path), *args]
    )
    assert result.exit_code == 0, result.output
    assert seen["s"].scheduling == SchedulerLimits(
        max_batch=3, max_queue=5, tenant_max=2, prefill_chunk=64, deadline_s=9.0
    )
