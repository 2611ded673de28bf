"""The service's validation, without a server (the fast loop): the job request and the
deployment request the routes use refuse every bad parameter by name and coerce nothing; a
dataset budget's bounds; the record index that makes a budget follow its records."""

from __future__ import annotations

import pytest
from pydantic import TypeAdapter, ValidationError

from privlm.data import Record
from privlm.service import datasets as ds_api
from privlm.service.db import Dataset, database_url, make_engine, session_factory
from privlm.service.deployments import parse_request
from privlm.service.keys import create_tenant
from privlm.service.protocol import job_request
from privlm.service.record_index import (
    find_matches,
    fingerprint,
    index_records,
    keyed_digests,
    server_secret,
    tenant_key,
)
from tests.service.test_validation import BAD_DEPLOYMENT_SETTINGS, BAD_JOB_PARAMS, INF, NAN

pytestmark = pytest.mark.fast

TASKS = {"pate": {"task": "sst2", "public_dataset_id": "ds_pub"}, "prompt-dpsgd": {"task": "sst2"}}


def refused_naming(validate, body, field):
    with pytest.raises(ValidationError) as caught:
        validate(body)
    located = [".".join(str(p) for p in e["loc"]) for e in caught.value.errors()]
    assert any(field in where for where in located), (field, located)


@pytest.mark.parametrize("kind,params,field", BAD_JOB_PARAMS)
def test_the_job_request_refuses_each_bad_parameter_by_name(kind, params, field):
    body = {"kind": kind, "dataset_id": "ds_x", "params": {**TASKS.get(kind, {}), **params}}
    refused_naming(TypeAdapter(job_request()).validate_python, body, field)


def test_the_job_request_is_strict_and_knows_its_kinds():
    adapter = TypeAdapter(job_request())
    refused_naming(adapter.validate_python, {"kind": "dpsgd", "dataset_id": 5}, "dataset_id")
    extra = {"kind": "dpsgd", "dataset_id": "ds_x", "params": {}, "priority": 1}
    refused_naming(adapter.validate_python, extra, "priority")
    with pytest.raises(ValidationError, match="unknown job kind"):
        adapter.validate_python({"kind": "nope", "dataset_id": "ds_x"})
    ok = adapter.validate_python({"kind": "dpsgd", "dataset_id": "ds_x", "params": {"epsilon": 2}})
    assert ok.params.epsilon == 2.0 and ok.params.config(1e-6).target_epsilon == 2.0


@pytest.mark.parametrize("body,field", BAD_DEPLOYMENT_SETTINGS)
def test_the_deployment_request_refuses_each_bad_setting_by_name(body, field):
    refused_naming(parse_request, {"job_id": "job_x", **body}, field)


@pytest.mark.parametrize("epsilon", [1e308, INF, NAN, 0.0, -1.0, 0.001])
def test_an_absurd_dataset_budget_is_refused(epsilon):
    with pytest.raises(ds_api.UploadError, match="budget_epsilon"):
        ds_api.check_budget(epsilon, 1e-6)


def test_records_are_keyed_per_tenant_and_a_subset_finds_its_budget(tmp_path):
    sessions = session_factory(make_engine(database_url(None, tmp_path)))
    with sessions.begin() as s:
        secret = server_secret(s, tmp_path)
        a, _ = create_tenant(s, "a")
        b, _ = create_tenant(s, "b")
        s.add(Dataset(id="ds_first", tenant_id=a.id, name="notes", format="txt", records=10,
                      bytes=90, path="", budget_epsilon=8.0, budget_delta=1e-6))  # fmt: skip
        s.flush()
        records = [Record(f"note {i}", f"record-{i}") for i in range(10)]
        mine, theirs = tenant_key(secret, a.id), tenant_key(secret, b.id)
        assert keyed_digests(records, mine).isdisjoint(keyed_digests(records, theirs))
        index_records(s, a.id, fingerprint(records, mine, "ds_first"), "ds_first")
        subset = [Record(" note  3 ", "record-0"), Record("Note 4.", "record-1")]  # spacing, case
        assert find_matches(s, a.id, fingerprint(subset, mine, "x")).owners() == {"ds_first": 2}
        assert not find_matches(s, b.id, fingerprint(subset, theirs, "x")).owners()
    with sessions.begin() as s:
        assert server_secret(s, tmp_path) == secret  # the same key, checked against the db
