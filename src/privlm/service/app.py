"""The HTTP API (FastAPI) and the perturbation page, assembled from one router per resource
(``privlm.service.routes``) around the shared state on ``app.state.service``.

Every route below ``/v1`` except the public perturbation assets needs
``Authorization: Bearer <API key>``; every lookup is made together with the caller's tenant,
and another tenant's resource is reported exactly like a missing one (404). Errors are JSON
``{"error": {"type", "message"}}`` and never quote the request body.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from privlm.accounting.ledger import durable_engine
from privlm.service import openai_api
from privlm.service.api_errors import SafeJSONResponse
from privlm.service.datasets import load_records, sweep_uploads
from privlm.service.db import ledger_url, make_engine, session_factory
from privlm.service.deployments import DeploymentRuntime
from privlm.service.errors_http import install_error_handlers
from privlm.service.health import ServiceHealth
from privlm.service.keys import tenant_for_key
from privlm.service.limits import BodySizeLimit
from privlm.service.record_index import backfill, server_secret
from privlm.service.routes import admin, datasets, deployments, jobs, keys, page
from privlm.service.state import ServiceSettings as ServiceSettings
from privlm.service.state import ServiceState
from privlm.service.url_keys import AccessLog, KeyBeforeBody, KeysNotInUrls


def routers() -> tuple[Any, ...]:
    """One router per resource; the jobs' and the deployments' built now, their requests
    and answers unions of the job kinds and mechanisms registered now."""
    return (
        page.router,
        datasets.router,
        jobs.assembled(),
        deployments.assembled(),
        openai_api.router,
        keys.router,
        admin.router,
    )


def service_state(settings: ServiceSettings) -> ServiceState:
    """The databases, the ledgers' pool and the deployment runtime of one service; the
    leftovers of uploads a crash interrupted are swept, and the records of datasets stored
    before the record index are indexed."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    engine = make_engine(settings.db_url)
    ledgers = ledger_url(settings.db_url, settings.data_dir)
    sessions = session_factory(engine)
    with sessions.begin() as s:
        sweep_uploads(settings.data_dir, s)
        secret = server_secret(s, settings.data_dir)
        backfill(s, secret, load_records)
    return ServiceState(
        settings, engine, sessions, ledgers, durable_engine(ledgers),
        DeploymentRuntime(ledgers, settings.scheduling), secret, ServiceHealth(sessions),
    )  # fmt: skip


def create_app(settings: ServiceSettings) -> FastAPI:
    state = service_state(settings)
    app = FastAPI(
        title="privlm", version="1", docs_url="/docs", redoc_url=None,
        default_response_class=SafeJSONResponse,
    )  # fmt: skip
    app.state.service = state
    # what the dependencies (privlm.service.auth) and older callers read
    app.state.settings, app.state.engine = settings, state.engine
    app.state.runtime, app.state.sessions = state.runtime, state.sessions
    install_error_handlers(app)
    for router in routers():
        app.include_router(router)
    app.mount("/static", StaticFiles(directory=page.STATIC), name="static")
    app.state.asgi = guarded(app, state)
    return app


def guarded(app: FastAPI, state: ServiceState) -> Any:
    """The app behind the body-size limit, the check that a key is known before a large
    body is read, the key-in-URL guard and privlm's access log."""
    settings = state.settings
    limited = BodySizeLimit(
        app, settings.max_body_bytes, settings.max_upload_bytes, ("/v1/datasets",)
    )

    def known(key: str) -> bool:
        with state.sessions.begin() as s:
            return tenant_for_key(s, key) is not None

    return AccessLog(KeysNotInUrls(KeyBeforeBody(limited, known, ("/v1/datasets",))))


def asgi_app(settings: ServiceSettings, workers: Any = None) -> Any:
    """The FastAPI app wrapped in the body-size limit, the key-in-URL guard and privlm's
    access log: what uvicorn serves. ``workers``: the supervised job workers' pool
    (privlm.service.supervision), reported by /health."""
    app = create_app(settings)
    app.state.service.health.workers = workers
    return app.state.asgi
