"""The service's HTTP errors: JSON ``{"error": {"type", "message", ...}}`` with a status."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(self, status: int, kind: str, message: str, **extra: Any) -> None:
        self.status, self.kind, self.message, self.extra = status, kind, message, extra

    def body(self) -> dict[str, Any]:
        return {"error": {"type": self.kind, "message": self.message, **self.extra}}


def not_found(what: str, ident: str) -> ApiError:
    return ApiError(404, "not_found", f"no {what} {ident!r} for this tenant")


def invalid(message: str) -> ApiError:
    return ApiError(400, "invalid_request", message)
