"""``privlm serve`` (the web service and its job worker) and ``privlm service …`` (tenants,
API keys, the worker on its own)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import typer

from privlm.cli.common import DEVICE_OPTION, DTYPE_OPTION, JSON_OPTION, emit_json, user_errors
from privlm.config import option
from privlm.extras import require
from privlm.service.admission import SchedulerLimits

DATA_DIR_OPTION = typer.Option(
    Path(os.environ.get("PRIVLM_SERVICE_DIR", "privlm-service")),
    "--data-dir",
    help="Where the service keeps its database and tenants' files (env PRIVLM_SERVICE_DIR).",
)
DB_OPTION = typer.Option(
    None, "--db", help="Database URL (default: SQLite under --data-dir), e.g. postgresql://…"
)
# uvicorn's own default is 5 s, the same as httpx's pool: a request sent on a connection
# idle for about 5 s races the server's close and is answered with a TCP reset
KEEP_ALIVE_S = 75
MODEL_OPTION = typer.Option("smollm2-135m", "--model", help="Public model jobs train on.")

app = typer.Typer(
    help="Administer the service: tenants, API keys, the job worker.", no_args_is_help=True
)


def _url(db: str | None, data_dir: Path) -> str:
    from privlm.service.db import database_url

    data_dir.mkdir(parents=True, exist_ok=True)
    return database_url(db, data_dir)


@user_errors
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8000, help="Port."),
    data_dir: Path = DATA_DIR_OPTION,
    db: str | None = DB_OPTION,
    model: str = MODEL_OPTION,
    worker: bool = typer.Option(True, help="Start the job workers alongside."),
    workers: int = typer.Option(
        2,
        min=1,
        max=64,
        help="Job worker processes. A tenant runs at most workers − 1 jobs at once (at "
        "least 1), so with 2 or more one is always free for the other tenants.",
    ),
    max_upload_mb: float = typer.Option(20.0, help="Largest dataset upload, in MB."),
    keep_alive: int = typer.Option(
        KEEP_ALIVE_S,
        "--keep-alive",
        min=1,
        help="Seconds an idle HTTP connection stays open. Longer than the clients' own pools "
        "keep one (httpx: 5 s, a proxy: often 60 s), so a client never sends on a "
        "connection the server is closing (the client would see 'connection reset').",
    ),
    device: str = DEVICE_OPTION,
    dtype: str = DTYPE_OPTION,
    max_batch: int = option(SchedulerLimits, "max_batch"),
    max_queue: int = option(SchedulerLimits, "max_queue"),
    tenant_max: int = option(SchedulerLimits, "tenant_max"),
    prefill_chunk: int = option(SchedulerLimits, "prefill_chunk"),
    deadline_s: float = option(SchedulerLimits, "deadline_s", "--deadline"),
) -> None:
    """Start the web service (FastAPI on uvicorn) and its job worker."""
    require("service", "the service")
    import uvicorn

    from privlm.models.placement import DEVICE_ENV, DTYPE_ENV, resolve_placement
    from privlm.service.app import ServiceSettings, asgi_app

    place = resolve_placement(device, dtype)  # refused now, not at the first request
    # the server's deployments and the worker (a child: it inherits them) use this policy
    os.environ[DEVICE_ENV], os.environ[DTYPE_ENV] = str(place.device), place.describe()["dtype"]
    typer.echo(f"models on {place.describe()['device_name']} in {place.describe()['dtype']}")

    url = _url(db, data_dir)
    settings = ServiceSettings(
        data_dir=data_dir.resolve(), db_url=url, model=model,
        max_upload_bytes=int(max_upload_mb * (1 << 20)),
        scheduling=SchedulerLimits(
            max_batch=max_batch, max_queue=max_queue, tenant_max=tenant_max,
            prefill_chunk=prefill_chunk, deadline_s=deadline_s,
        ),
    )  # fmt: skip
    threads = max(1, (os.cpu_count() or 1) // workers)
    command = [
        sys.executable, "-m", "privlm", "service", "worker", "--data-dir", str(settings.data_dir),
        "--db", url, "--model", model, "--die-with-parent",
        "--tenant-cap", str(max(1, workers - 1)), "--threads", str(threads),
    ]  # fmt: skip
    from privlm.service.supervision import WorkerPool

    pool = WorkerPool.of_command(command, workers) if worker else None
    app_ = asgi_app(settings, pool)  # creates the schema before the workers start
    if pool is not None:
        pool.start()  # a worker that dies is started again (privlm.service.supervision)
    try:
        # uvicorn's access log writes query strings; privlm's own (url_keys.AccessLog) does not
        _log_access()
        uvicorn.run(
            app_, host=host, port=port, log_level="info", access_log=False,
            timeout_keep_alive=keep_alive,
        )  # fmt: skip
    finally:
        if pool is not None:
            pool.stop()


@app.command("worker")
@user_errors
def worker_cmd(
    data_dir: Path = DATA_DIR_OPTION,
    db: str | None = DB_OPTION,
    model: str = MODEL_OPTION,
    die_with_parent: bool = typer.Option(False, hidden=True),
    tenant_cap: int = typer.Option(
        1, min=1, help="Jobs one tenant may run at once, across all workers."
    ),
    threads: int | None = typer.Option(
        None, min=1, help="torch threads (default: all cores; share them between workers)."
    ),
) -> None:
    """Run queued jobs (privlm serve starts --workers of them; run more on other machines
    with --db). Tenants are served round-robin (privlm.service.job_queue)."""
    require("service", "the service")
    from privlm.service.worker import run_worker

    run_worker(_url(db, data_dir), data_dir.resolve(), model, die_with_parent, tenant_cap, threads)


@app.command("tenant-create")
@user_errors
def tenant_create(
    name: str = typer.Argument(..., help="Tenant name."),
    data_dir: Path = DATA_DIR_OPTION,
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Create a tenant and print its first API key (shown once; only its hash is stored)."""
    require("service", "the service")
    from privlm.service.db import make_engine, session_factory
    from privlm.service.keys import create_tenant

    with session_factory(make_engine(_url(db, data_dir))).begin() as s:
        tenant, key = create_tenant(s, name)
        tid = tenant.id
    if as_json:
        emit_json({"tenant": tid, "name": name, "api_key": key})
    else:
        typer.echo(f"tenant {name} ({tid})\nAPI key (shown once): {key}")


def _tenant_id(s: Any, name: str) -> str:
    from sqlalchemy import select

    from privlm.errors import PrivlmError
    from privlm.service.db import Tenant

    t = s.scalar(select(Tenant).where(Tenant.name == name))
    if t is None:
        raise PrivlmError(f"no tenant {name!r}")
    return str(t.id)


def _sessions(db: str | None, data_dir: Path) -> Any:
    from privlm.service.db import make_engine, session_factory

    return session_factory(make_engine(_url(db, data_dir)))


EXPIRES_OPTION = typer.Option(
    None, "--expires-days", help="The key stops working this many days from now (default: never)."
)


@app.command("key-add")
@user_errors
def key_add(
    name: str = typer.Argument(..., help="Tenant name."),
    expires_days: float | None = EXPIRES_OPTION,
    data_dir: Path = DATA_DIR_OPTION,
    db: str | None = DB_OPTION,
) -> None:
    """Add an API key to a tenant (shown once; only its hash is stored)."""
    require("service", "the service")
    from privlm.service.keys import add_key

    with _sessions(db, data_dir).begin() as s:
        key = add_key(s, _tenant_id(s, name), expires_days)
    typer.echo(f"API key (shown once): {key}")


@app.command("key-list")
@user_errors
def key_list(
    name: str = typer.Argument(..., help="Tenant name."),
    data_dir: Path = DATA_DIR_OPTION,
    db: str | None = DB_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """A tenant's API keys: prefix, state (active, expired, revoked) and dates."""
    require("service", "the service")
    from privlm.service.keys import list_keys

    with _sessions(db, data_dir).begin() as s:
        keys = list_keys(s, _tenant_id(s, name))
    if as_json:
        emit_json({"tenant": name, "keys": keys})
        return
    for k in keys:
        expires = k["expires_at"] or "never"
        typer.echo(f"{k['prefix']}…  {k['state']:<8} created {k['created_at']}  expires {expires}")


@app.command("key-revoke")
@user_errors
def key_revoke(
    name: str = typer.Argument(..., help="Tenant name."),
    prefix: str = typer.Argument(..., help="The key's first 12 characters (key-list), or the key."),
    data_dir: Path = DATA_DIR_OPTION,
    db: str | None = DB_OPTION,
) -> None:
    """Revoke one of a tenant's API keys: it stops working at once, on every route."""
    require("service", "the service")
    from privlm.service.keys import revoke_key

    with _sessions(db, data_dir).begin() as s:
        k = revoke_key(s, _tenant_id(s, name), prefix)
    typer.echo(f"revoked {k['prefix']}… ({name})")


@user_errors
def admin_key_add(data_dir: Path = DATA_DIR_OPTION, db: str | None = DB_OPTION) -> None:
    """Make an admin key for /v1/admin (shown once; only its hash is stored): it manages
    every tenant's keys over HTTP and reads no tenant's data."""
    require("service", "the service")
    from privlm.service.keys import add_admin_key

    with _sessions(db, data_dir).begin() as s:
        key = add_admin_key(s)
    typer.echo(f"admin key (shown once): {key}")


@user_errors
def admin_key_list(
    data_dir: Path = DATA_DIR_OPTION, db: str | None = DB_OPTION, as_json: bool = JSON_OPTION
) -> None:
    """The admin keys: prefix, state and dates."""
    require("service", "the service")
    from privlm.service.keys import list_admin_keys

    with _sessions(db, data_dir).begin() as s:
        keys = list_admin_keys(s)
    if as_json:
        emit_json({"admin_keys": keys})
        return
    for k in keys:
        typer.echo(f"{k['prefix']}…  {k['state']:<8} created {k['created_at']}")


@user_errors
def admin_key_revoke(
    prefix: str = typer.Argument(..., help="The key's first 16 characters (list), or the key."),
    data_dir: Path = DATA_DIR_OPTION,
    db: str | None = DB_OPTION,
) -> None:
    """Revoke an admin key: it stops working at once."""
    require("service", "the service")
    from privlm.service.keys import revoke_admin_key

    with _sessions(db, data_dir).begin() as s:
        k = revoke_admin_key(s, prefix)
    typer.echo(f"revoked admin key {k['prefix']}…")


def _log_access() -> None:
    """privlm's access log on stderr: method, path and status, never a query string."""
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s access %(message)s"))
    access = logging.getLogger("privlm.service.access")
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    access.propagate = False


keys_app = typer.Typer(help="A tenant's API keys: add, list, revoke.", no_args_is_help=True)
keys_app.command("add")(key_add)
keys_app.command("list")(key_list)
keys_app.command("revoke")(key_revoke)
app.add_typer(keys_app, name="keys")
admin_app = typer.Typer(
    help="The operator's admin keys, for /v1/admin: add, list, revoke.", no_args_is_help=True
)
admin_app.command("add")(admin_key_add)
admin_app.command("list")(admin_key_list)
admin_app.command("revoke")(admin_key_revoke)
app.add_typer(admin_app, name="admin-keys")
