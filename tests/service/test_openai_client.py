"""The official ``openai`` client against privlm on loopback (a real uvicorn
server in a thread): completions, chat with the model's template, streaming, /v1/models, a
429 when the budget runs out, a streamed token only after its charge, and a disconnect that
stops generation."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
import uvicorn
from fastapi.testclient import TestClient

from privlm.accounting import PrivacyLedger
from privlm.predict.pmixed import PMixED
from privlm.service.app import ServiceSettings, create_app
from privlm.service.db import database_url, ledger_url
from privlm.service.stop_text import StopText
from tests.service.conftest import TEXT, make_tenants, run_queue
from tests.service.live import free_port


class Served:
    """create_app served by uvicorn on a free loopback port, in this process."""

    def __init__(self, tmp: Path) -> None:
        self.settings = ServiceSettings(
            data_dir=tmp / "svc", db_url=database_url(None, tmp), model="tiny", vocabulary=2000
        )
        app = create_app(self.settings)
        self.runtime = app.state.runtime
        self.key = make_tenants(self.settings.db_url, "acme")["acme"]
        self.local = TestClient(app.state.asgi, headers={"Authorization": f"Bearer {self.key}"})
        self.url = f"http://127.0.0.1:{free_port()}"
        port = int(self.url.rsplit(":", 1)[1])
        config = uvicorn.Config(app.state.asgi, host="127.0.0.1", port=port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def client(self, **kw) -> openai.OpenAI:
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=self.key, max_retries=0, **kw)

    def deploy(self, job_id: str, **params) -> str:
        r = self.local.post("/v1/deployments", json={"job_id": job_id, **params})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def charged(self, dep: str) -> int:
        return PrivacyLedger(ledger_url(self.settings.db_url, self.settings.data_dir),
                             f"deployment-{dep}").count()  # fmt: skip


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    srv = Served(tmp_path_factory.mktemp("openai"))
    ds = srv.local.post(
        "/v1/datasets", files={"file": ("notes.txt", TEXT.encode(), "text/plain")},
        data={"budget_epsilon": "200"},
    ).json()  # fmt: skip
    r = srv.local.post(
        "/v1/jobs",
        json={"kind": "ensemble", "dataset_id": ds["id"],
              "params": {"parts": 2, "block_size": 16, "max_blocks": 2}},
    )  # fmt: skip
    assert run_queue(srv) == 1
    job = srv.local.get(f"/v1/jobs/{r.json()['id']}").json()
    assert job["status"] == "succeeded", job
    srv.job = job["id"]
    srv.dep = srv.deploy(job["id"], mechanism="pmixed", epsilon=8, queries=5000)
    srv.start()
    yield srv
    srv.stop()


def test_completions_and_models_through_the_official_client(served):
    client = served.client()
    before = served.charged(served.dep)
    c = client.completions.create(model=served.dep, prompt="the patient", max_tokens=5)
    assert c.object == "text_completion" and c.model == served.dep
    assert c.choices[0].finish_reason in ("length", "stop")
    assert c.usage.completion_tokens == served.charged(served.dep) - before
    assert 1 <= c.usage.completion_tokens <= 5
    assert c.model_extra["privlm"]["private_tokens"] == c.usage.completion_tokens
    models = {m.id: m for m in client.models.list()}
    assert (
        served.dep in models and models[served.dep].model_extra["privlm"]["mechanism"] == "pmixed"
    )


def test_chat_uses_the_models_chat_template(served):
    client = served.client()
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    c = client.chat.completions.create(model=served.dep, messages=messages, max_tokens=4)
    assert c.object == "chat.completion" and c.choices[0].message.role == "assistant"
    tok = served.runtime._loaded[served.dep].tokenizer
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered.endswith("<|im_start|>assistant\n")
    assert c.usage.prompt_tokens == len(tok(rendered, add_special_tokens=False)["input_ids"])
    assert "<|im_end|>" not in (c.choices[0].message.content or "")


def test_streaming_sends_every_charged_token_in_order(served):
    client = served.client()
    before = served.charged(served.dep)
    chunks = list(
        client.completions.create(
            model=served.dep, prompt="the patient", max_tokens=8, stream=True,
            stream_options={"include_usage": True},
        )
    )  # fmt: skip
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens == served.charged(served.dep) - before
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finish[-1] in ("length", "stop") and all(f is None for f in finish[:-1])

    chat = list(
        client.chat.completions.create(
            model=served.dep, messages=[{"role": "user", "content": "hello"}], max_tokens=6,
            stream=True,
        )
    )  # fmt: skip
    assert chat[0].object == "chat.completion.chunk"
    assert chat[0].choices[0].delta.role == "assistant"
    assert chat[-1].choices[0].finish_reason in ("length", "stop")


def test_a_streamed_token_is_sent_only_after_its_charge_is_committed(served):
    """Read the raw events one at a time: whenever k pieces have arrived, at least k tokens
    are already in the durable ledger."""
    before = served.charged(served.dep)
    body = {"model": served.dep, "prompt": "the patient", "max_tokens": 12, "stream": True}
    seen = 0
    with httpx.stream(
        "POST", f"{served.url}/v1/completions", json=body, timeout=60,
        headers={"Authorization": f"Bearer {served.key}"},
    ) as r:  # fmt: skip
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            choices = json.loads(line[6:])["choices"]
            if choices and choices[0]["text"]:
                seen += 1
                assert served.charged(served.dep) - before >= seen
    assert seen >= 1


@pytest.fixture
def slow_charges(monkeypatch):
    """Every query slowed to 50 ms: 200 tokens would take 10 s."""
    charge = PMixED._charge_one

    def slow_charge(self):
        time.sleep(0.05)
        charge(self)

    monkeypatch.setattr(PMixED, "_charge_one", slow_charge)


def charges_stop_and_the_deployment_answers(served, before: int) -> int:
    """The ledger stops growing once the client has gone (what it charged stays), and the
    deployment answers the next request; how many charges the gone client's request made."""
    time.sleep(1.0)
    stopped_at = served.charged(served.dep) - before
    time.sleep(1.0)
    assert served.charged(served.dep) - before == stopped_at  # nothing more is charged
    c = served.client(timeout=30).completions.create(model=served.dep, prompt="x", max_tokens=1)
    assert c.usage.completion_tokens == 1
    return stopped_at


def test_a_client_that_disconnects_stops_generation(served, slow_charges):
    """The client leaves a 200-token stream after two pieces."""
    before = served.charged(served.dep)
    body = {"model": served.dep, "prompt": "the patient", "max_tokens": 200, "stream": True}
    with httpx.stream(
        "POST", f"{served.url}/v1/completions", json=body, timeout=60,
        headers={"Authorization": f"Bearer {served.key}"},
    ) as r:  # fmt: skip
        events = 0
        for line in r.iter_lines():
            events += line.startswith("data: ")
            if events == 2:
                break
    stopped_at = charges_stop_and_the_deployment_answers(served, before)
    assert 2 <= stopped_at < 10, stopped_at


def test_a_client_that_gives_up_on_a_whole_answer_stops_generation(served, slow_charges):
    """Not streaming: the client's read times out after 1 s (about 20 of 200 tokens) and it
    hangs up: no budget is spent on an answer nobody receives (an OpenAI client's retry
    would otherwise pay for the same answer twice)."""
    before = served.charged(served.dep)
    body = {"model": served.dep, "prompt": "the patient", "max_tokens": 200}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            f"{served.url}/v1/completions", json=body, timeout=httpx.Timeout(30, read=1.0),
            headers={"Authorization": f"Bearer {served.key}"},
        )  # fmt: skip
    stopped_at = charges_stop_and_the_deployment_answers(served, before)
    assert 1 <= stopped_at < 100, stopped_at


def test_budget_exhaustion_is_a_429_with_the_reason(served):
    dep = served.deploy(served.job, mechanism="pmixed", epsilon=8, queries=3)
    client = served.client()
    client.completions.create(model=dep, prompt="the patient", max_tokens=3)
    for call in (
        lambda: client.completions.create(model=dep, prompt="the patient", max_tokens=2),
        lambda: list(client.chat.completions.create(
            model=dep, messages=[{"role": "user", "content": "hi"}], max_tokens=2, stream=True)),
    ):  # fmt: skip
        with pytest.raises(openai.RateLimitError, match=r"privacy budget .* is spent") as err:
            call()
        assert err.value.status_code == 429
        assert err.value.body["type"] == "budget_exhausted"
    assert served.charged(dep) == 3


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("logprobs", 2, "log-probabilities"),
        ("logit_bias", {"5": 10}, "logit bias"),
        ("seed", 7, "CSPRNG"),
        ("temperature", 0.5, "temperature"),
        ("n", 2, "n must be 1"),
        ("frequency_penalty", 0.5, "frequency penalty"),
    ],
)
def test_fields_that_would_release_more_are_refused_with_the_reason(served, field, value, reason):
    client = served.client()
    before = served.charged(served.dep)
    with pytest.raises(openai.BadRequestError, match=reason):
        client.completions.create(
            model=served.dep, prompt="x", max_tokens=1, extra_body={field: value}
        )
    assert served.charged(served.dep) == before


def test_unknown_fields_are_refused_not_ignored(served):
    with pytest.raises(openai.BadRequestError, match="unsupported field 'mirostat'"):
        served.client().chat.completions.create(
            model=served.dep, messages=[{"role": "user", "content": "x"}],
            extra_body={"mirostat": 2},
        )  # fmt: skip
    # neutral values are accepted
    c = served.client().completions.create(
        model=served.dep, prompt="x", max_tokens=1, temperature=1, top_p=1, user="u-1"
    )
    assert c.usage.completion_tokens == 1


@pytest.mark.fast
def test_stop_strings_hold_back_what_could_begin_a_stop():
    s = StopText(["END", "\n\n"])
    assert s.feed("abc E") == "abc "  # "E" could begin END
    assert s.feed("N") == ""
    assert s.feed("x") == "ENx"
    assert s.feed("yy\n") == "yy"
    assert s.feed("\nrest") == "" and s.hit
    t = StopText(["END"])
    assert t.feed("fooEN") == "foo" and t.flush() == "EN" and not t.hit
    assert StopText([]).feed("anything") == "anything"


def test_work_abandoned_by_its_client_ends_as_client_gone_not_a_500():
    """The client leaves while a whole answer is being collected: the work is cancelled and
    awaited, and the route answers 499; reading the result of a task only asked to cancel
    raised InvalidStateError (a 500)."""
    import asyncio

    from privlm.service.openai_api import ClientGone, unless_gone

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        gone: asyncio.Future[None] = loop.create_future()
        stopped = asyncio.Event()

        async def collect() -> str:
            try:
                await asyncio.sleep(30)
            finally:
                stopped.set()
            return "never"

        loop.call_later(0.05, gone.set_result, None)
        with pytest.raises(ClientGone):
            await unless_gone(collect(), gone)
        assert stopped.is_set()  # the work was cancelled, not left running

        async def quick() -> str:
            return "answer"

        assert await unless_gone(quick(), loop.create_future()) == "answer"

    asyncio.run(scenario())
