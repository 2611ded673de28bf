"""What the service's routers share, kept on ``app.state.service`` (as vLLM's server keeps
its engine on ``app.state``): the settings, the database sessions, the ledgers' database and
the loaded deployments. Routers read it through the :data:`State` dependency, so each router
can be mounted on an app of its own in a test."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, Request
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from privlm.accounting.ledger import PrivacyLedger
from privlm.perturb.vocabulary import DEFAULT_VOCABULARY
from privlm.service.admission import SchedulerLimits
from privlm.service.api_errors import not_found
from privlm.service.db import Dataset, Tenant
from privlm.service.deployments import DeploymentRuntime
from privlm.service.health import ServiceHealth
from privlm.service.job_runners import dataset_ledger


@dataclass(kw_only=True)
class ServiceSettings:
    data_dir: Path
    db_url: str
    model: str = "smollm2-135m"
    max_body_bytes: int = 1 << 20
    max_upload_bytes: int = 20 << 20
    vocabulary: int = DEFAULT_VOCABULARY
    scheduling: SchedulerLimits = field(default_factory=SchedulerLimits)


@dataclass
class ServiceState:
    """The shared state of one service instance."""

    settings: ServiceSettings
    engine: Engine
    sessions: sessionmaker[Session]
    ledgers: str  # the ledgers' database (a SQLAlchemy URL)
    ledger_engine: Engine  # one pool for the datasets' ledgers
    runtime: DeploymentRuntime
    record_secret: bytes  # keys the tenants' record digests (privlm.service.record_index)
    health: ServiceHealth  # what /health and /metrics report (privlm.service.health)

    def dataset_ledger(self, row: Dataset) -> PrivacyLedger:
        """The dataset's one budget."""
        return dataset_ledger(self.ledger_engine, row)

    def budget_ledger(self, row: Dataset) -> PrivacyLedger | None:
        """A private dataset's ledger; a public one has none."""
        return None if row.kind == "public" else self.dataset_ledger(row)


def service_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


State = Annotated[ServiceState, Depends(service_state)]


def own(s: Session, model: Any, ident: str, me: Tenant, what: str) -> Any:
    """The caller's row ``ident`` of ``model``; another tenant's is reported exactly like a
    missing one (404)."""
    query = select(model).where(model.id == ident, model.tenant_id == me.id)
    if model is Dataset:  # a deleted dataset is a tombstone, kept for its budget only
        query = query.where(Dataset.deleted_at.is_(None))
    row = s.scalar(query)
    if row is None:
        raise not_found(what, ident)
    return row
