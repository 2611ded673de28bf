"""Every job and deployment parameter is validated when it is submitted, and a
bad one is refused with a 400 in the documented error shape, naming the field. Nothing is
coerced: true and "3" are not numbers, Infinity and NaN are not finite."""

from __future__ import annotations

import json

import pytest

INF, NAN = float("inf"), float("nan")

BAD_JOB_PARAMS = [
    ("dpsgd", {"max_grad_norm": INF}, "max_grad_norm"),
    ("dpsgd", {"max_grad_norm": NAN}, "max_grad_norm"),
    ("dpsgd", {"learning_rate": INF}, "learning_rate"),
    ("dpsgd", {"epsilon": True}, "epsilon"),
    ("dpsgd", {"epsilon": "3"}, "epsilon"),
    ("dpsgd", {"epochs": 2.0}, "epochs"),
    ("dpsgd", {"epochs": "2"}, "epochs"),
    ("jft", {"detector": "psychic"}, "detector"),
    ("jft", {"detector": "regex+psychic"}, "detector"),
    ("ensemble", {"parts": True}, "parts"),
    ("pate", {"threshold": 1e9}, "threshold"),
    ("pate", {"sigma_threshold": INF}, "sigma_threshold"),
    ("pate", {"sigma": 1e300}, "sigma"),
    ("pate", {"holdout": 10**9}, "holdout"),
    ("pate", {"accounting": "raw"}, "accounting"),
    ("prompt-dpsgd", {"epsilon": NAN}, "epsilon"),
]
BAD_DEPLOYMENT_SETTINGS = [
    ({"mechanism": "submix", "beta": INF}, "beta"),
    ({"mechanism": "submix", "beta": 1e300}, "beta"),
    ({"epsilon": True}, "epsilon"),
    ({"queries": "100"}, "queries"),
    ({"sample_rate": NAN}, "sample_rate"),
    ({"fallback": "yes"}, "fallback"),
    ({"mechanism": "pmixed", "beta": 0.1}, "beta"),  # another mechanism's setting
]


def post_json(service, path, body, tenant="acme"):
    """json.dumps writes Infinity and NaN, as a careless client would."""
    return service.client.post(
        path,
        headers={**service.auth(tenant), "content-type": "application/json"},
        content=json.dumps(body),
    )


def assert_names(r, field, kind="invalid_request"):
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["type"] == kind and field in error["message"]


@pytest.mark.parametrize("kind,params,field", BAD_JOB_PARAMS)
def test_a_bad_job_parameter_is_refused_by_name(service, kind, params, field):
    ds = service.upload("acme").json()
    extra = {"task": "sst2", "public_dataset_id": ds["id"]} if kind == "pate" else {}
    extra = {"task": "sst2"} if kind == "prompt-dpsgd" else extra
    body = {"kind": kind, "dataset_id": ds["id"], "params": {**extra, **params}}
    assert_names(post_json(service, "/v1/jobs", body), field)


@pytest.mark.parametrize("body,field", BAD_DEPLOYMENT_SETTINGS)
def test_a_bad_deployment_parameter_is_refused_by_name(service, body, field):
    assert_names(post_json(service, "/v1/deployments", {"job_id": "job_x", **body}), field)


@pytest.mark.parametrize("value", ["1e308", "inf", "nan", "0", "-1"])
def test_an_absurd_dataset_budget_is_refused_by_name(service, value):
    assert_names(service.upload("acme", budget_epsilon=value), "budget_epsilon", "invalid_dataset")


def test_the_job_request_itself_is_strict(service):
    ds = service.upload("acme").json()
    assert_names(post_json(service, "/v1/jobs", {"kind": "dpsgd", "dataset_id": 5}), "dataset_id")
    body = {"kind": "dpsgd", "dataset_id": ds["id"], "params": {}, "priority": 1}
    assert_names(post_json(service, "/v1/jobs", body), "priority")


# -- keys --------------------------------------------------------------------------------------


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_bearer_scheme_is_case_insensitive(service, scheme):
    key = service.keys["acme"]
    r = service.client.get("/v1/datasets", headers={"Authorization": f"{scheme} {key}"})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("scheme", ["Basic", "Token", "Bearer", ""])
def test_another_scheme_or_no_key_is_unauthorized(service, scheme):
    r = service.client.get("/v1/datasets", headers={"Authorization": f"{scheme} "})
    assert r.status_code == 401 and r.json()["error"]["type"] == "unauthorized"


@pytest.mark.parametrize(
    "query",
    ["api_key={key}", "key={key}", "x=1&token=abc", "q={key}", "Authorization=Bearer%20{key}"],
)
def test_a_key_in_the_url_is_refused_and_never_logged(service, caplog, query):
    key = service.keys["acme"]
    with caplog.at_level("INFO", logger="privlm.service.access"):
        r = service.client.get(
            "/v1/datasets?" + query.format(key=key), headers=service.auth("acme")
        )
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request"
    assert "Authorization: Bearer" in r.json()["error"]["message"] and key not in r.text
    assert caplog.records and all(key not in rec.getMessage() for rec in caplog.records)
    assert "/v1/datasets" in caplog.records[-1].getMessage()


def test_the_access_log_never_writes_a_query_string(service, caplog):
    with caplog.at_level("INFO", logger="privlm.service.access"):
        service.client.get("/v1/datasets?limit=5", headers=service.auth("acme"))
    [line] = [rec.getMessage() for rec in caplog.records if rec.name == "privlm.service.access"]
    assert line == "GET /v1/datasets 200"


def test_an_epsilon_above_the_datasets_remaining_budget_is_refused_at_submission(service):
    ds = service.upload("acme", budget_epsilon=4).json()
    body = {"kind": "dpsgd", "dataset_id": ds["id"], "params": {"epsilon": 5}}
    r = post_json(service, "/v1/jobs", body)
    assert_names(r, "params.epsilon")
    assert "what is left of the dataset's budget (ε 4 of 4" in r.json()["error"]["message"]
    body["params"]["epsilon"] = 3
    assert post_json(service, "/v1/jobs", body).status_code == 201


def raw_json(service, path, text, tenant="acme"):
    return service.client.post(
        path, headers={**service.auth(tenant), "content-type": "application/json"},
        content=text.encode(),
    )  # fmt: skip


@pytest.mark.parametrize(
    "path,text,says",
    [
        ("/v1/completions", '{"model": "dep_x", "prompt": "hi \\ud800 there"}', "the prompt"),
        ("/v1/chat/completions",
         '{"model": "dep_x", "messages": [{"role": "user", "content": "a\\udfff"}]}',
         "a message"),
        ("/v1/completions", '{"model": "dep_x", "prompt": "hi", "stop": "\\ud800"}',
         "a stop string"),
    ],
)  # fmt: skip
def test_a_lone_surrogate_is_a_400_not_a_500(service, path, text, says):
    r = raw_json(service, path, text)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "invalid_request" and says in r.text
    assert "lone surrogate" in r.text


def test_an_error_that_names_unencodable_text_is_still_sent(service):
    """An error naming what it was given, which holds a lone surrogate (UTF-8 cannot encode
    it), goes out as JSON with ASCII escapes instead of failing with a 500."""
    from privlm.service.api_errors import SafeJSONResponse, not_found

    body = json.loads(SafeJSONResponse(not_found("deployment", "dep_\ud800").body()).body)
    assert body["error"]["message"] == "no deployment 'dep_\\ud800' for this tenant"
    assert json.loads(SafeJSONResponse({"m": "a\ud800"}).body) == {"m": "a\ud800"}
    r = raw_json(service, "/v1/completions", '{"model": "dep_\\ud800", "prompt": "hi"}')
    assert r.status_code in (400, 404) and "error" in r.json()


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
@pytest.mark.parametrize(
    "field,value,why",
    [("logprobs", 3, "log-probabilities"), ("logprobs", True, "log-probabilities"),
     ("top_logprobs", 2, "log-probabilities"), ("logit_bias", {"50256": -100}, "logit bias")],
)  # fmt: skip
def test_logprobs_and_logit_bias_are_refused_with_the_reason(service, path, field, value, why):
    body = {"model": "dep_x", field: value}
    body |= (
        {"prompt": "hi"}
        if path == "/v1/completions"
        else {"messages": [{"role": "user", "content": "hi"}]}
    )
    r = post_json(service, path, body)
    assert_names(r, field)
    assert why in r.json()["error"]["message"]


@pytest.mark.parametrize(
    "method,path,status",
    [("GET", "/v1/nothing-here", 404), ("PUT", "/v1/health", 405),
     ("GET", "/v1/datasets", 401), ("GET", "/v1/jobs/job_missing", 404),
     ("POST", "/v1/jobs", 400)],
)  # fmt: skip
def test_every_error_has_the_documented_shape(service, method, path, status):
    headers = {} if status == 401 else service.auth("acme")
    r = service.client.request(method, path, headers=headers)
    assert r.status_code == status
    body = r.json()
    assert set(body) == {"error"} and {"type", "message"} <= set(body["error"])


def test_an_upload_without_a_valid_key_is_refused_before_its_body_is_read(service):
    """The ASGI app is called directly: reading the body would raise."""
    import asyncio

    async def never_read():
        raise AssertionError("the body was read")

    for headers in ([], [(b"authorization", b"Bearer plk_not-a-key")]):
        sent: list[dict] = []

        async def send(message, sent=sent):
            sent.append(message)

        scope = {"type": "http", "method": "POST", "path": "/v1/datasets", "headers": headers,
                 "query_string": b"", "http_version": "1.1", "scheme": "http",
                 "server": ("test", 80), "client": ("test", 1), "root_path": ""}  # fmt: skip
        asyncio.run(service.state.asgi(scope, never_read, send))
        assert sent[0]["status"] == 401
        assert json.loads(sent[1]["body"])["error"]["type"] == "unauthorized"


def _files_under(root):
    return sorted(p.name for p in root.rglob("*") if p.is_file() and "datasets" in p.parts)


@pytest.mark.parametrize(
    ("value", "says"),
    [('"hello"', "must be a JSON object"), ("[1, 2]", "must be a JSON object"),
     ("5", "must be a JSON object"), ('{"epsilon": NaN}', "must be JSON"),
     ('{"a": "\\ud800"}', "lone surrogate"), ('{"a": "x\\u0000"}', "escaped NUL"),
     ('{"a": ' * 9 + "1" + "}" * 9, "nested deeper"), ("[" * 5000 + "]" * 5000, "nested deeper"), ("{not json", "must be JSON")],
)  # fmt: skip
def test_a_bad_perturbation_field_is_a_400_and_keeps_nothing(service, value, says, caplog):
    """Each was a 500 after the file had been moved into place (a file with no row, which
    the tenant could neither list nor delete), or accepted against the docs."""
    before = _files_under(service.settings.data_dir)
    r = service.upload("acme", perturbation=value)
    assert r.status_code == 400, r.text
    assert says in r.json()["error"]["message"]
    assert _files_under(service.settings.data_dir) == before
    listed = service.client.get("/v1/datasets", headers=service.auth("acme")).json()["data"]
    assert listed == []
    assert "hello" not in caplog.text


def test_an_upload_refused_at_its_commit_leaves_no_file(service, monkeypatch):
    from privlm.service import datasets as ds_api

    def broken(*args, **kwargs):
        raise ds_api.UploadError("the commit failed")

    monkeypatch.setattr(ds_api, "commit_upload", broken)
    before = _files_under(service.settings.data_dir)
    r = service.upload("acme")
    assert r.status_code == 400 and _files_under(service.settings.data_dir) == before


def test_a_crash_between_an_uploads_commit_and_its_move_is_finished_at_the_next_start(
    service, monkeypatch
):
    """The row is committed, then the file moves into place: a crash between the two left
    a row whose file the start-up sweep then deleted. The next start now finishes the move,
    and still removes a leftover whose upload never committed."""
    from privlm.service import datasets as ds_api
    from privlm.service.app import create_app

    monkeypatch.setattr(ds_api, "place_upload", lambda prepared: None)  # died right there
    ds = service.upload("acme").json()
    stray = next(service.settings.data_dir.rglob(f"*{ds['id']}*")).with_name(".upload-ds_x.txt")
    stray.write_text("an upload that never committed")
    monkeypatch.undo()
    create_app(service.settings)  # the next start
    assert _files_under(service.settings.data_dir) == [f"{ds['id']}.txt"]
    shown = service.client.get(f"/v1/datasets/{ds['id']}", headers=service.auth("acme"))
    assert shown.status_code == 200 and shown.json()["records"] == ds["records"]


def test_upload_and_job_refusals_speak_the_services_terms(service):
    """A refusal names the service's fields, not the CLI's flags."""
    r = service.upload("acme", "body,label\nhello there,neg\n", filename="t.csv")
    assert r.status_code == 400 and "no 'text' column" in r.text
    assert "--text-column" not in r.text and "--no-header" not in r.text
    ds = service.upload("acme", "text,label\nhello there,neg\nfine day,pos\n", filename="l.csv")
    assert ds.status_code == 201, ds.text
    r = service.client.post(
        "/v1/jobs", headers=service.auth("acme"),
        json={"kind": "synth", "dataset_id": ds.json()["id"], "params": {"count": 2}},
    )  # fmt: skip
    assert r.status_code == 400 and "params.labels" in r.text


def test_the_deploy_form_offers_only_the_choices_a_deployment_accepts(service):
    listed = service.client.get("/v1/mechanisms").json()["data"]
    (pmixed,) = [m for m in listed if m["name"] == "pmixed"]
    (bound,) = [f for f in pmixed["fields"] if f["name"] == "bound"]
    assert bound["choices"] == ["replacement"]  # expansion and jensen only plan, per part
