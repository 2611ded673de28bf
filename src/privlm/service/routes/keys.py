"""``/v1/keys``: a tenant lists its API keys and revokes one (a key sent in a URL, or
leaked, is revoked here or with ``privlm service keys revoke``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from privlm.errors import PrivlmError
from privlm.service.api_errors import ApiError
from privlm.service.auth import Db, Me
from privlm.service.keys import list_keys, revoke_key
from privlm.service.protocol import ERRORS, ApiKeyList, ApiKeyView

router = APIRouter(prefix="/v1/keys")


@router.get("", response_model=ApiKeyList, responses=ERRORS)
def list_my_keys(s: Db, me: Me) -> dict[str, Any]:
    """The caller's tenant's keys: prefix, state and dates."""
    return {"data": list_keys(s, me.id)}


@router.delete("/{prefix}", response_model=ApiKeyView, responses=ERRORS)
def revoke_my_key(prefix: str, s: Db, me: Me) -> dict[str, Any]:
    """Revoke one of the tenant's keys (the caller's own included): it stops working at
    once, on every route."""
    try:
        return revoke_key(s, me.id, prefix)
    except PrivlmError as exc:
        raise ApiError(404, "not_found", str(exc)) from None
