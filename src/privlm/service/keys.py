"""Tenants and their API keys. A key is 32 random bytes shown once; the database keeps only
its SHA-256 (a key has 256 bits of entropy, so a fast hash is enough: there is nothing to
brute-force) and a short prefix to find the row."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from privlm.errors import PrivlmError
from privlm.service.db import AdminKey, ApiKey, Tenant, new_id, now

KEY_PREFIX = "plm_"
# an admin key begins with a tenant key's prefix too, so the door refuses it in a URL alike;
# the two are told apart by the table that holds their hash, never by the prefix alone
ADMIN_PREFIX = KEY_PREFIX + "admin_"


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def create_tenant(session: Session, name: str) -> tuple[Tenant, str]:
    """A new tenant and its first API key (returned once, never stored)."""
    name = name.strip()
    if not name or len(name) > 200:
        raise PrivlmError("a tenant name must be 1 to 200 characters")
    if session.scalar(select(Tenant).where(Tenant.name == name)) is not None:
        raise PrivlmError(f"tenant {name!r} already exists")
    tenant = Tenant(id=new_id("tn"), name=name)
    session.add(tenant)
    session.flush()
    return tenant, add_key(session, tenant.id)


def add_key(session: Session, tenant_id: str, expires_in_days: float | None = None) -> str:
    """A new key for the tenant (returned once, never stored); ``expires_in_days``: it stops
    working that long from now (None: until revoked)."""
    if expires_in_days is not None and not 0 < expires_in_days <= 3650:
        raise PrivlmError("a key's expiry must lie between 0 and 3650 days from now")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    expires = None if expires_in_days is None else now() + timedelta(days=expires_in_days)
    session.add(
        ApiKey(tenant_id=tenant_id, prefix=key[:12], key_hash=hash_key(key), expires_at=expires)
    )
    session.flush()
    return key


def tenant_for_key(session: Session, key: str) -> Tenant | None:
    """The tenant owning ``key``, or None (unknown, revoked or expired)."""
    if not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None
    digest = hash_key(key)
    for row in session.scalars(
        select(ApiKey).where(ApiKey.prefix == key[:12], ApiKey.revoked.is_(False))
    ):
        if hmac.compare_digest(row.key_hash, digest):
            if row.expires_at is not None and row.expires_at <= now():
                return None
            return session.get(Tenant, row.tenant_id)
    return None


def describe_key(row: ApiKey) -> dict[str, Any]:
    """A key as its owner sees it: its prefix and dates, never the key or its hash."""
    state = "revoked" if row.revoked else "active"
    if not row.revoked and row.expires_at is not None and row.expires_at <= now():
        state = "expired"
    return {
        "prefix": row.prefix,
        "state": state,
        "created_at": row.created_at.isoformat() + "Z",
        "expires_at": None if row.expires_at is None else row.expires_at.isoformat() + "Z",
        "revoked_at": None if row.revoked_at is None else row.revoked_at.isoformat() + "Z",
    }


def list_keys(session: Session, tenant_id: str) -> list[dict[str, Any]]:
    rows = session.scalars(select(ApiKey).where(ApiKey.tenant_id == tenant_id).order_by(ApiKey.id))
    return [describe_key(r) for r in rows]


def revoke_key(session: Session, tenant_id: str, prefix: str) -> dict[str, Any]:
    """Revoke the tenant's key whose first 12 characters are ``prefix`` (what
    :func:`list_keys` shows, and what a leaked key begins with: a full key works too).
    It stops working at once, for every route; refused when no such key is the tenant's."""
    prefix = prefix.strip()[:12]
    rows = list(
        session.scalars(
            select(ApiKey).where(ApiKey.tenant_id == tenant_id, ApiKey.prefix == prefix)
        )
    )
    if not rows:
        raise PrivlmError(f"this tenant has no API key beginning {prefix!r}")
    for row in rows:
        if not row.revoked:
            row.revoked, row.revoked_at = True, now()
    session.flush()
    return describe_key(rows[0])


def tenant_named(session: Session, name: str) -> Tenant:
    """The tenant called ``name``; refused when there is none."""
    tenant = session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        raise PrivlmError(f"no tenant {name!r}")
    return tenant


def list_tenants(session: Session) -> list[dict[str, Any]]:
    """Every tenant with how many of its keys work now: what an operator sees."""
    out = []
    for t in session.scalars(select(Tenant).order_by(Tenant.created_at, Tenant.id)):
        keys = list_keys(session, t.id)
        active = sum(k["state"] == "active" for k in keys)
        out.append({"name": t.name, "id": t.id, "created_at": t.created_at.isoformat() + "Z",
                    "active_keys": active})  # fmt: skip
    return out


def add_admin_key(session: Session) -> str:
    """A new admin key (returned once, never stored)."""
    key = ADMIN_PREFIX + secrets.token_urlsafe(32)
    session.add(AdminKey(prefix=key[:16], key_hash=hash_key(key)))
    session.flush()
    return key


def is_admin_key(session: Session, key: str) -> bool:
    """Whether ``key`` is an admin key that was not revoked."""
    if not key.startswith(ADMIN_PREFIX) or len(key) > 200:
        return False
    digest = hash_key(key)
    rows = session.scalars(
        select(AdminKey).where(AdminKey.prefix == key[:16], AdminKey.revoked.is_(False))
    )
    return any(hmac.compare_digest(row.key_hash, digest) for row in rows)


def list_admin_keys(session: Session) -> list[dict[str, Any]]:
    rows = session.scalars(select(AdminKey).order_by(AdminKey.id))
    return [_describe_admin_key(r) for r in rows]


def revoke_admin_key(session: Session, prefix: str) -> dict[str, Any]:
    """Revoke the admin key whose first 16 characters are ``prefix`` (or the whole key)."""
    prefix = prefix.strip()[:16]
    rows = list(session.scalars(select(AdminKey).where(AdminKey.prefix == prefix)))
    if not rows:
        raise PrivlmError(f"no admin key begins {prefix!r}")
    for row in rows:
        if not row.revoked:
            row.revoked, row.revoked_at = True, now()
    session.flush()
    return _describe_admin_key(rows[0])


def _describe_admin_key(row: AdminKey) -> dict[str, Any]:
    return {
        "prefix": row.prefix,
        "state": "revoked" if row.revoked else "active",
        "created_at": row.created_at.isoformat() + "Z",
        "revoked_at": None if row.revoked_at is None else row.revoked_at.isoformat() + "Z",
    }
