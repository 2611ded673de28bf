"""``/v1/admin``: the operator's routes, with an admin key (``privlm service admin-keys
add``): create tenants, and list, add and revoke any tenant's API keys, as ``privlm
service tenant-create`` and ``privlm service keys …`` do on the server's machine. An admin
key reads no tenant's datasets, jobs or deployments: those routes refuse it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from privlm.errors import PrivlmError
from privlm.service.api_errors import ApiError
from privlm.service.auth import Admin, Db
from privlm.service.db import ApiKey
from privlm.service.keys import (
    add_key,
    create_tenant,
    describe_key,
    list_keys,
    list_tenants,
    revoke_key,
    tenant_named,
)
from privlm.service.protocol import (
    ERRORS,
    ApiKeyList,
    ApiKeyView,
    NewApiKey,
    NewKeyRequest,
    NewTenant,
    NewTenantRequest,
    TenantList,
)

router = APIRouter(prefix="/v1/admin", dependencies=[Admin])


def _tenant_id(s: Db, name: str) -> str:
    try:
        return tenant_named(s, name).id
    except PrivlmError as exc:
        raise ApiError(404, "not_found", str(exc)) from None


@router.get("/tenants", response_model=TenantList, responses=ERRORS)
def all_tenants(s: Db) -> dict[str, Any]:
    """Every tenant, with how many of its keys work now."""
    return {"data": list_tenants(s)}


@router.post("/tenants", response_model=NewTenant, status_code=201, responses=ERRORS)
def new_tenant(req: NewTenantRequest, s: Db) -> dict[str, Any]:
    """A tenant and its first key (shown once)."""
    try:
        tenant, key = create_tenant(s, req.name)
    except PrivlmError as exc:
        raise ApiError(409, "conflict", str(exc)) from None
    view = next(t for t in list_tenants(s) if t["id"] == tenant.id)
    return {"tenant": view, "api_key": key}


@router.get("/tenants/{name}/keys", response_model=ApiKeyList, responses=ERRORS)
def tenant_keys(name: str, s: Db) -> dict[str, Any]:
    """One tenant's keys: prefix, state and dates, never a key."""
    return {"data": list_keys(s, _tenant_id(s, name))}


@router.post("/tenants/{name}/keys", response_model=NewApiKey, status_code=201, responses=ERRORS)
def new_tenant_key(name: str, req: NewKeyRequest, s: Db) -> dict[str, Any]:
    """A new key for the tenant, optionally expiring (shown once)."""
    key = add_key(s, _tenant_id(s, name), req.expires_in_days)
    row = s.query(ApiKey).filter(ApiKey.prefix == key[:12]).one()
    return {"api_key": key, "key": describe_key(row)}


@router.delete("/tenants/{name}/keys/{prefix}", response_model=ApiKeyView, responses=ERRORS)
def revoke_tenant_key(name: str, prefix: str, s: Db) -> dict[str, Any]:
    """Revoke one of the tenant's keys: it stops working at once, on every route."""
    try:
        return revoke_key(s, _tenant_id(s, name), prefix)
    except PrivlmError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
