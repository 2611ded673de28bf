"""``Idempotency-Key`` on the POSTs that create something (a job, a deployment): the first
request with a key is recorded with its answer in the same transaction as what it created;
a retry with the same key and the same request gets that answer and creates nothing (a
client whose connection dropped may retry safely), and the same key with another request
is refused (422). Keys are per tenant. The model is Stripe's idempotent requests."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Header
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from privlm.service.api_errors import ApiError
from privlm.service.db import IdempotencyKey

KeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key", max_length=200,
        description="A retry with the same key and request gets the first answer",
    ),
]  # fmt: skip


def request_digest(body: Any) -> str:
    data = body.model_dump(mode="json") if hasattr(body, "model_dump") else body
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def once(
    s: Session, tenant_id: str, key: str | None, route: str, body: Any,
    create: Callable[[], dict[str, Any]],
) -> dict[str, Any]:  # fmt: skip
    """``create()``'s answer, made once per (tenant, key): a recorded key with the same
    request returns its recorded answer; with another request, 422."""
    if key is None:
        return create()
    if not key.strip() or any(not c.isprintable() for c in key):
        raise ApiError(400, "invalid_request", "Idempotency-Key: printable text, 1 to 200 chars")
    digest = request_digest(body)
    found = s.get(IdempotencyKey, (tenant_id, key))
    if found is not None:
        if found.route != route or found.request_digest != digest:
            raise ApiError(
                422, "invalid_request",
                "this Idempotency-Key was used with another request; use a new key for a new "
                "request",
            )  # fmt: skip
        if not found.answer:
            raise ApiError(409, "conflict", "a request with this Idempotency-Key is in progress")
        answer: dict[str, Any] = json.loads(found.answer)
        return answer
    row = IdempotencyKey(tenant_id=tenant_id, key=key, route=route, request_digest=digest)
    try:
        with s.begin_nested():  # a concurrent twin waits here, then fails on the key
            s.add(row)
            s.flush()
    except IntegrityError:
        raise ApiError(
            409, "conflict", "a request with this Idempotency-Key is in progress; retry"
        ) from None
    answer = create()
    row.answer = json.dumps(answer, default=str)
    s.flush()
    return answer
