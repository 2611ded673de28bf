"""A new private mechanism is its module plus one registration
(:mod:`privlm.predict.mechanisms`): a toy one, registered here and nowhere else, appears in
the CLI's options and plan commands, in the service's request schema and its
``/v1/mechanisms``, deploys, answers and is charged through the service, and its fields
appear on the page."""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass
from typing import Any

import pytest
from typer.testing import CliRunner

from privlm.config import check_settings, setting
from privlm.predict.mechanisms import Guarantee, Mechanism, register_mechanism, unregister_mechanism


@dataclass(frozen=True, kw_only=True)
class ToyConfig:
    """PMixED over every member at once (q = 1), its one knob a toy's."""

    epsilon: float = setting(6.0, "Toy: ε of all its tokens, at δ", gt=0, le=1000)
    delta: float = setting(1e-5, "δ", gt=0, lt=1)
    queries: int = setting(64, "Toy: private tokens over its life", ge=1, le=10**6)
    toy_knob: float = setting(0.5, "Toy: a knob only the toy has", ge=0, le=1)

    def __post_init__(self) -> None:
        check_settings(self)

    def pmixed(self) -> Any:
        from privlm.predict.config import PMixEDConfig

        return PMixEDConfig(
            epsilon=self.epsilon, delta=self.delta, queries=self.queries, sample_rate=1.0
        )


def build_toy(config: ToyConfig, loaded: Any, ledger: Any, name: str, seed: int | None) -> Any:
    from privlm.accounting import Budget, PrivacyLedger
    from privlm.predict.pmixed import PMixED

    led = PrivacyLedger(ledger, name, Budget(config.epsilon, config.delta))
    return PMixED(loaded.engine, loaded.model.tokenizer, led, config.pmixed(), seed)


TOY = Mechanism(
    "toy", ToyConfig, "A toy: PMixED with every member in every query",
    serves="pmixed", builder=build_toy,
    lifetime=lambda cfg, n: cfg.pmixed().lifetime_curve(n),
    guarantee=lambda cfg, _: Guarantee("DP", "per unit", f"({cfg.epsilon:g}, {cfg.delta:g})-DP"),
    open_ledgers=lambda target, name, cfg, n: [],
    plan=lambda cfg, n: {"mechanism": "toy", "members": n, "lines": [f"toy over {n} members"]},
)  # fmt: skip


@pytest.fixture
def toy():
    register_mechanism(TOY)
    yield TOY
    unregister_mechanism("toy")


@pytest.mark.fast
def test_the_cli_offers_the_toy_and_its_setting(toy):
    from privlm.cli import full_app

    runner = CliRunner()
    app = full_app()  # built now: the registry as it is
    generate = runner.invoke(app, ["generate", "--help"], terminal_width=200).output
    assert "--toy-knob" in generate and "toy: Toy: a knob only the toy" in generate
    evaluate = runner.invoke(app, ["eval", "ppl", "--help"], terminal_width=200).output
    assert "--toy-knob" in evaluate
    plan = runner.invoke(app, ["plan", "toy", "--ensemble-size", "7", "--toy-knob", "0.2"])
    assert plan.exit_code == 0 and "toy over 7 members" in plan.output
    bad = runner.invoke(app, ["plan", "toy", "--toy-knob", "2"])
    assert bad.exit_code == 2 and "at most 1" in bad.output


def test_the_service_schema_and_mechanisms_list_the_toy_and_it_deploys(toy, service_factory):
    from tests.service.conftest import complete, deploy

    service, ensemble_job = service_factory()
    schema = service.client.get("/openapi.json").json()
    toy_schema = schema["components"]["schemas"]["ToyDeployment"]
    assert toy_schema["properties"]["toy_knob"]["maximum"] == 1
    assert toy_schema["properties"]["mechanism"]["const"] == "toy"
    listed = service.client.get("/v1/mechanisms").json()["data"]
    (mine,) = [m for m in listed if m["name"] == "toy"]
    assert mine["serves"] == "pmixed" and {f["name"] for f in mine["fields"]} == {
        "epsilon", "delta", "queries", "toy_knob"
    }  # fmt: skip
    r = deploy(service, "acme", ensemble_job["id"], mechanism="toy", queries=4, beta=0.1)
    assert r.status_code == 400 and "beta" in r.text  # another mechanism's setting
    r = deploy(service, "acme", ensemble_job["id"], mechanism="toy", queries=4, toy_knob=0.2)
    assert r.status_code == 201, r.text
    dep = r.json()
    assert dep["params"]["toy_knob"] == 0.2 and dep["guarantee"]["text"] == "(6, 1e-05)-DP"
    out = complete(service, "acme", dep["id"], max_tokens=2)
    assert out.status_code == 200 and out.json()["privlm"]["private_tokens"] == 2


@pytest.fixture
def service_factory(tmp_path):
    """A service built after the toy was registered, with a finished PMixED ensemble."""
    from tests.service.conftest import Service, job, make_tenants, run_queue, submit

    def make():
        from fastapi.testclient import TestClient

        from privlm.service.app import ServiceSettings, create_app
        from privlm.service.db import database_url

        settings = ServiceSettings(
            data_dir=tmp_path / "svc", db_url=database_url(None, tmp_path), model="tiny",
            vocabulary=2000,
        )  # fmt: skip
        app = create_app(settings)
        keys = make_tenants(settings.db_url, "acme")
        service = Service(TestClient(app.state.asgi), settings, keys, app.state)
        ds = service.upload("acme", "\n".join(f"a note number {i}" for i in range(30))).json()
        j = submit(service, "acme", "ensemble", ds["id"], parts=2, block_size=16, max_blocks=1)
        run_queue(service)
        return service, job(service, "acme", j["id"])

    return make


def test_the_page_shows_the_toy_and_its_fields(toy, service_factory):
    """The page's deploy form is built from /v1/mechanisms: the toy appears for a PMixED
    ensemble, with an input for its own setting."""
    import uvicorn
    from playwright.sync_api import sync_playwright

    from tests.service.live import free_port
    from tests.service.test_browser import CHROMIUM, FLAGS

    if not shutil.which(CHROMIUM):
        pytest.fail("Debian's chromium is needed (make test installs it)")
    service, ensemble_job = service_factory()
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(service.client.app, port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/")
            page.fill("#api-key", service.keys["acme"])
            page.click("#save-key")
            page.wait_for_selector("#key-status:has-text('key accepted')")
            page.wait_for_function(
                f"document.getElementById('dep-job').value === '{ensemble_job['id']}'"
            )
            page.wait_for_selector("#dep-mechanism option[value='toy']", state="attached")
            page.select_option("#dep-mechanism", "toy")
            page.wait_for_selector("#dep-field-toy_knob")
            value = page.input_value("#dep-field-toy_knob")
            help_text = page.inner_text("#dep-field-toy_knob-label")
            browser.close()
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    assert value == "0.5" and "a knob only the toy has" in help_text
