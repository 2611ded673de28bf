"""The service's schema (SQLAlchemy 2 ORM). Every resource row carries its tenant; the API
only ever looks rows up together with the caller's tenant id.

SQLite (the default, under the data directory) runs in WAL mode with full fsync and
``BEGIN IMMEDIATE`` transactions, like the privacy ledger; PostgreSQL works through the same
code (``--db postgresql://…``).
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import (
    Boolean,
    Engine,
    Float,
    ForeignKey,
    Integer,
    LargeBinary,
    String,
    Text,
    inspect,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker

from privlm.accounting.ledger import durable_engine


def now() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


def new_id(prefix: str) -> str:
    """An unguessable public id, e.g. ``ds_3f9c…`` (scoping never relies on it)."""
    return f"{prefix}_{secrets.token_hex(10)}"


class Base(DeclarativeBase):
    pass


class Tenant(Base):
    __tablename__ = "tenants"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=now)


class ApiKey(Base):
    __tablename__ = "api_keys"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    prefix: Mapped[str] = mapped_column(String(16), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=now)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    revoked_at: Mapped[datetime | None] = mapped_column(nullable=True)
    expires_at: Mapped[datetime | None] = mapped_column(nullable=True)  # None: never


class AdminKey(Base):
    """A key for the operator's admin routes (``/v1/admin``): it manages every tenant's keys
    and reads no tenant's data. Only its SHA-256 is kept, as for a tenant's key."""

    __tablename__ = "admin_keys"
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    prefix: Mapped[str] = mapped_column(String(16), index=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=now)
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    revoked_at: Mapped[datetime | None] = mapped_column(nullable=True)


class Dataset(Base):
    __tablename__ = "datasets"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(String(200))
    format: Mapped[str] = mapped_column(String(8))
    records: Mapped[int] = mapped_column(Integer)
    bytes: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(Text)
    budget_epsilon: Mapped[float] = mapped_column(Float)
    budget_delta: Mapped[float] = mapped_column(Float)
    perturbation: Mapped[str | None] = mapped_column(Text, nullable=True)  # JSON, if perturbed
    # the tenant requires DP-only artefacts: selective-DP jobs (JFT direct mode) are refused
    require_dp: Mapped[bool] = mapped_column(Boolean, default=False)
    # "private" (budgeted) or "public" (declared public at upload: no budget, may be
    # released verbatim, e.g. as PromptPATE's public inputs)
    kind: Mapped[str] = mapped_column(String(8), default="private")
    content_digest: Mapped[str | None] = mapped_column(String(64), nullable=True)
    # the dataset whose ledger is this one's budget: its own id, or the first dataset it
    # shares a record with (privlm.service.record_index); None in databases made before
    budget_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    # "record" or "user": the privacy unit of its records; for the dataset that founded a
    # budget, the budget's one declared unit (None in databases made before)
    unit_kind: Mapped[str | None] = mapped_column(String(8), nullable=True)
    records_indexed: Mapped[bool] = mapped_column(Boolean, default=False)
    # a deleted dataset is a tombstone: its file and text are gone, its row, ledger and
    # record digests stay, so an upload of the same records draws on the same budget
    deleted_at: Mapped[datetime | None] = mapped_column(nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=now)

    @property
    def ledger_name(self) -> str:
        """The name of this dataset's budget ledger (shared by every dataset of its records)."""
        return f"dataset-{self.budget_id or self.id}"


class RecordDigest(Base):
    """A text a tenant uploaded in a private dataset (any text-bearing field), as a keyed
    digest of its canonical form, with the budget it belongs to, the keyed privacy unit it
    was in ("*": several) and its near-copy sketch; kept when the dataset is deleted
    (privlm.service.record_index)."""

    __tablename__ = "record_digests"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    budget_id: Mapped[str] = mapped_column(String(40), index=True)
    unit: Mapped[str | None] = mapped_column(String(32), nullable=True)  # None: made before
    sketch_size: Mapped[int | None] = mapped_column(Integer, nullable=True)
    sketch: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)


class SketchBand(Base):
    """One LSH band of a text's near-copy sketch, as a keyed digest: texts that share a
    band are near-copy candidates (privlm.data.sketch)."""

    __tablename__ = "sketch_bands"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    band: Mapped[str] = mapped_column(String(16), primary_key=True)
    digest: Mapped[str] = mapped_column(String(64), primary_key=True)


class IdempotencyKey(Base):
    """A POST's ``Idempotency-Key`` and the answer it got: a retry with the same key and
    request gets the same answer and creates nothing (privlm.service.idempotency)."""

    __tablename__ = "idempotency_keys"
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    route: Mapped[str] = mapped_column(String(40))
    request_digest: Mapped[str] = mapped_column(String(64))
    answer: Mapped[str] = mapped_column(Text, default="")  # JSON, once answered
    created_at: Mapped[datetime] = mapped_column(default=now)


class ServiceMeta(Base):
    """Facts about the service itself (e.g. a check value of the record key)."""

    __tablename__ = "service_meta"
    key: Mapped[str] = mapped_column(String(80), primary_key=True)
    value: Mapped[str] = mapped_column(Text)


class Job(Base):
    __tablename__ = "jobs"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    kind: Mapped[str] = mapped_column(String(20))
    dataset_id: Mapped[str] = mapped_column(String(40))
    params: Mapped[str] = mapped_column(Text)  # JSON
    # queued → running → succeeded | failed | cancelled (a queued job may be cancelled too)
    status: Mapped[str] = mapped_column(String(12), default="queued", index=True)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, default=False)
    stage: Mapped[str] = mapped_column(String(80), default="")
    steps_done: Mapped[int] = mapped_column(Integer, default=0)
    steps_total: Mapped[int | None] = mapped_column(Integer, nullable=True)
    percent: Mapped[float] = mapped_column(Float, default=0.0)
    epsilon_spent: Mapped[float | None] = mapped_column(Float, nullable=True)
    epsilon_planned: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    events: Mapped[str] = mapped_column(Text, default="[]")  # JSON list of {at, what}
    output_dir: Mapped[str] = mapped_column(Text, default="")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker_pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    worker_host: Mapped[str | None] = mapped_column(String(200), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(nullable=True)
    created_at: Mapped[datetime] = mapped_column(default=now)
    started_at: Mapped[datetime | None] = mapped_column(nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(nullable=True)


class Deployment(Base):
    __tablename__ = "deployments"
    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id"), index=True)
    job_id: Mapped[str] = mapped_column(String(40))
    mechanism: Mapped[str] = mapped_column(String(12))  # pmixed | submix | adapter
    params: Mapped[str] = mapped_column(Text)  # JSON
    budget_epsilon: Mapped[float] = mapped_column(Float)
    budget_delta: Mapped[float] = mapped_column(Float)
    fallback: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(default=now)


def database_url(db: str | None, data_dir: Path) -> str:
    """``--db`` as given, or SQLite under the data directory."""
    if db:
        return db if "://" in db else f"sqlite:///{Path(db).expanduser().resolve()}"
    return f"sqlite:///{(data_dir / 'privlm-service.db').resolve()}"


def ledger_url(db_url: str, data_dir: Path) -> str:
    """Where the privacy ledgers live: the same database on a server (PostgreSQL locks rows),
    but, with SQLite, a file of their own beside the service's, so that a request holding the
    service database never waits on a ledger charge or the reverse."""
    if db_url.startswith("sqlite"):
        return f"sqlite:///{(data_dir / 'privacy-ledgers.db').resolve()}"
    return db_url


# columns added after a table was first created: (table, column, DDL type and default)
ADDED_COLUMNS = [
    ("datasets", "require_dp", "BOOLEAN NOT NULL DEFAULT FALSE"),
    ("jobs", "cancel_requested", "BOOLEAN NOT NULL DEFAULT FALSE"),
    ("datasets", "kind", "VARCHAR(8) NOT NULL DEFAULT 'private'"),
    ("datasets", "content_digest", "VARCHAR(64)"),
    ("datasets", "budget_id", "VARCHAR(40)"),
    ("datasets", "records_indexed", "BOOLEAN NOT NULL DEFAULT FALSE"),
    ("datasets", "deleted_at", "TIMESTAMP"),
    ("api_keys", "revoked_at", "TIMESTAMP"),
    ("api_keys", "expires_at", "TIMESTAMP"),
    ("datasets", "unit_kind", "VARCHAR(8)"),
    ("record_digests", "unit", "VARCHAR(32)"),
    ("record_digests", "sketch_size", "INTEGER"),
    ("record_digests", "sketch", "BLOB"),
]


def make_engine(url: str) -> Engine:
    """The service's engine (the ledger's durable settings) with its schema created, and a
    database made by an earlier privlm brought up to date (its rows kept)."""
    engine = durable_engine(url)
    Base.metadata.create_all(engine)
    with engine.begin() as conn:  # one connection: a second would wait on this one's lock
        have = inspect(conn)
        for table, column, ddl in ADDED_COLUMNS:
            if column not in {c["name"] for c in have.get_columns(table)}:
                if conn.dialect.name == "postgresql":
                    ddl = ddl.replace("BLOB", "BYTEA")
                conn.exec_driver_sql(f"ALTER TABLE {table} ADD COLUMN {column} {ddl}")
    return engine


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)
