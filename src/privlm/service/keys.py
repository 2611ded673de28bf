"""Tenants and their API keys. A key is 32 random bytes shown once; the database keeps only
its SHA-256 (a key has 256 bits of entropy, so a fast hash is enough: there is nothing to
brute-force) and a short prefix to find the row."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from sqlalchemy import select
from sqlalchemy.orm import Session

from privlm.errors import PrivlmError
from privlm.service.db import ApiKey, Tenant, new_id

KEY_PREFIX = "plm_"


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


def add_key(session: Session, tenant_id: str) -> str:
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiKey(tenant_id=tenant_id, prefix=key[:12], key_hash=hash_key(key)))
    return key


def tenant_for_key(session: Session, key: str) -> Tenant | None:
    """The tenant owning ``key``, or None (unknown or revoked)."""
    if not key.startswith(KEY_PREFIX) or len(key) > 200:
        return None
    digest = hash_key(key)
    for row in session.scalars(
        select(ApiKey).where(ApiKey.prefix == key[:12], ApiKey.revoked.is_(False))
    ):
        if hmac.compare_digest(row.key_hash, digest):
            return session.get(Tenant, row.tenant_id)
    return None
