"""Who is calling: one database transaction per request, and the caller's tenant from the
``Authorization: Bearer <API key>`` header."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from privlm.service.api_errors import ApiError
from privlm.service.db import Tenant
from privlm.service.keys import is_admin_key, tenant_for_key


def get_session(request: Request) -> Iterator[Session]:
    """One transaction per request."""
    with request.app.state.sessions.begin() as s:
        yield s


def get_tenant(
    s: Annotated[Session, Depends(get_session)],
    authorization: Annotated[str | None, Header()] = None,
) -> Tenant:
    t = tenant_for_key(s, _bearer(authorization, "an API key"))
    if t is None:
        raise ApiError(401, "unauthorized", "unknown or revoked API key")
    return t


def _bearer(authorization: str | None, what: str) -> str:
    scheme, _, key = (authorization or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not key.strip():  # the scheme is case-insensitive
        raise ApiError(401, "unauthorized", f"send {what}: Authorization: Bearer <key>")
    return key.strip()


def get_admin(
    s: Annotated[Session, Depends(get_session)],
    authorization: Annotated[str | None, Header()] = None,
) -> None:
    """The operator's routes take an admin key (``privlm service admin-keys add``); a
    tenant's key, however valid, is refused like an unknown one."""
    if not is_admin_key(s, _bearer(authorization, "an admin key")):
        raise ApiError(401, "unauthorized", "unknown or revoked admin key")


def get_tenant_briefly(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Tenant:
    """The caller's tenant, from a transaction closed at once: for routes that must not hold
    the database while they work (generation charges the ledger token by token)."""
    with request.app.state.sessions.begin() as s:
        return get_tenant(s, authorization)


Db = Annotated[Session, Depends(get_session)]
Me = Annotated[Tenant, Depends(get_tenant)]
MeBriefly = Annotated[Tenant, Depends(get_tenant_briefly)]
Admin = Depends(get_admin)
