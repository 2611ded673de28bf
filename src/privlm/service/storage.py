"""Where a tenant's files live: ``<data dir>/tenants/<tenant id>/{datasets,jobs}/``. Paths
are built from ids the service generated, never from user input."""

from __future__ import annotations

import re
from pathlib import Path

from privlm.errors import PrivlmError

_ID = re.compile(r"^[a-z]{2,4}_[0-9a-f]{20}$")


def _checked(ident: str) -> str:
    if not _ID.match(ident):
        raise PrivlmError("malformed id")
    return ident


def tenant_dir(root: Path, tenant_id: str) -> Path:
    return root / "tenants" / _checked(tenant_id)


def dataset_path(root: Path, tenant_id: str, dataset_id: str, suffix: str) -> Path:
    return tenant_dir(root, tenant_id) / "datasets" / f"{_checked(dataset_id)}{suffix}"


def job_dir(root: Path, tenant_id: str, job_id: str) -> Path:
    return tenant_dir(root, tenant_id) / "jobs" / _checked(job_id)
