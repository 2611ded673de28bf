"""A service on a temporary directory, the tiny model, and two tenants."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from privlm.service.app import ServiceSettings, create_app
from privlm.service.db import database_url, ledger_url, make_engine, session_factory
from privlm.service.keys import create_tenant
from privlm.service.worker import Worker

TEXT = "\n".join(
    f"patient {i} was seen on monday and feels {'better' if i % 2 else 'worse'} today"
    for i in range(40)
)


@dataclass
class Service:
    client: TestClient
    settings: ServiceSettings
    keys: dict[str, str]
    state: Any = None  # the app's state: settings, database engine, deployment runtime

    @property
    def ledgers(self) -> str:
        return ledger_url(self.settings.db_url, self.settings.data_dir)

    def auth(self, tenant: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.keys[tenant]}"}

    def admin(self) -> dict[str, str]:
        """A new admin key's header (privlm service admin-keys add)."""
        from privlm.service.keys import add_admin_key

        with session_factory(make_engine(self.settings.db_url)).begin() as s:
            return {"Authorization": f"Bearer {add_admin_key(s)}"}

    def upload(self, tenant: str, text: str = TEXT, filename: str = "notes.txt", **form):
        return self.client.post(
            "/v1/datasets",
            headers=self.auth(tenant),
            files={"file": (filename, text.encode(), "text/plain")},
            data={k: str(v) for k, v in form.items()},
        )


def make_tenants(db_url: str, *names: str) -> dict[str, str]:
    keys = {}
    with session_factory(make_engine(db_url)).begin() as s:
        for n in names:
            _, keys[n] = create_tenant(s, n)
    return keys


@pytest.fixture
def service(tmp_path: Path) -> Service:
    settings = ServiceSettings(
        data_dir=tmp_path / "svc", db_url=database_url(None, tmp_path), model="tiny",
        max_body_bytes=64 << 10, max_upload_bytes=256 << 10, vocabulary=2000,
    )  # fmt: skip
    app = create_app(settings)
    keys = make_tenants(settings.db_url, "acme", "globex")
    return Service(TestClient(app.state.asgi), settings, keys, app.state)


# -- jobs and deployments through the API ----------------------------------------------------


def run_queue(service) -> int:
    s = service.settings
    return Worker(s.db_url, s.data_dir, s.model, poll=0.05).loop(once=True)


def submit(service, tenant, kind, dataset_id, **params):
    r = service.client.post(
        "/v1/jobs",
        headers=service.auth(tenant),
        json={"kind": kind, "dataset_id": dataset_id, "params": params},
    )
    assert r.status_code == 201, r.text
    return r.json()


def job(service, tenant, job_id):
    return service.client.get(f"/v1/jobs/{job_id}", headers=service.auth(tenant)).json()


@pytest.fixture
def ensemble_job(service):
    ds = service.upload("acme").json()
    j = submit(service, "acme", "ensemble", ds["id"], parts=2, block_size=16, max_blocks=2)
    assert j["status"] == "queued"
    assert run_queue(service) == 1
    done = job(service, "acme", j["id"])
    assert done["status"] == "succeeded", done
    assert done["progress"]["percent"] == 100.0 and done["attempts"] == 1
    return done


def deploy(service, tenant, job_id, **kw):
    return service.client.post(
        "/v1/deployments", headers=service.auth(tenant), json={"job_id": job_id, **kw}
    )


def complete(service, tenant, dep, max_tokens=4, **kw):
    return service.client.post(
        "/v1/completions",
        headers=service.auth(tenant),
        json={"model": dep, "prompt": "the patient", "max_tokens": max_tokens, **kw},
    )


def assert_names_no_server_path(service, zipped: bytes) -> None:
    """No file of a downloaded artefact names a server path: the data directory, the layout
    under it (a tenant's folder, a job's), or a scrubbed remnant of one."""
    import io
    import zipfile

    files = zipfile.ZipFile(io.BytesIO(zipped))
    for name in files.namelist():
        if name.endswith(".safetensors"):
            continue
        text = files.read(name).decode(errors="replace")
        for shape in (str(service.settings.data_dir), "tenants/", "/jobs/", "ten_", "<server>"):
            assert shape not in text, (name, shape)


@pytest.fixture(scope="module")
def pg():
    """A throwaway PostgreSQL cluster for the module (tests.service.pg)."""
    import shutil
    import tempfile
    from pathlib import Path

    from tests.service.pg import Postgres

    # not under pytest's tmp (mode 700 for root): the postgres user must reach the cluster
    root = Path(tempfile.mkdtemp(prefix="privlm-pg-"))
    db = Postgres(root).start()
    yield db
    db.stop()
    shutil.rmtree(root, ignore_errors=True)
