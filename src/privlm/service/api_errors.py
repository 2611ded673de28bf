"""The service's HTTP errors: JSON ``{"error": {"type", "message", ...}}`` with a status."""

from __future__ import annotations

import json
from typing import Any

from fastapi.responses import JSONResponse


class ApiError(Exception):
    def __init__(
        self, status: int, kind: str, message: str, headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:  # fmt: skip
        self.status, self.kind, self.message, self.extra = status, kind, message, extra
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"type": self.kind, "message": self.message, **self.extra}}


def not_found(what: str, ident: str) -> ApiError:
    return ApiError(404, "not_found", f"no {what} {ident!r} for this tenant")


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request", message)


class SafeJSONResponse(JSONResponse):
    """JSON that can always be sent: text holding a lone surrogate (which UTF-8 cannot
    encode) is written with ASCII escapes instead of failing with a 500."""

    def render(self, content: Any) -> bytes:
        try:
            return super().render(content)
        except UnicodeEncodeError:
            return json.dumps(content, separators=(",", ":")).encode("ascii")


def require_encodable(text: str, what: str) -> str:
    """``text``, or a 400 when it cannot be encoded as UTF-8 (a lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise invalid(
            f"{what} is not valid Unicode text: it holds a lone surrogate at character {exc.start}"
        ) from None
    return text
