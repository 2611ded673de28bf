"""Request size limits, as a pure ASGI middleware: a body over the limit is refused with 413
before it is read in full, whether or not it declares a Content-Length."""

from __future__ import annotations

import json
from typing import Any

Scope = dict[str, Any]


class BodyTooLarge(Exception):
    pass


class BodySizeLimit:
    def __init__(
        self, app: Any, default_limit: int, upload_limit: int, upload_paths: tuple[str, ...]
    ) -> None:
        self.app = app
        self.default_limit, self.upload_limit = default_limit, upload_limit
        self.upload_paths = upload_paths

    def limit_for(self, scope: Scope) -> int:
        path = scope.get("path", "")
        return self.upload_limit if path in self.upload_paths else self.default_limit

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope)
        for name, value in scope.get("headers", []):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await refuse(send, 400, "invalid Content-Length header")
                    return
                if declared > limit:
                    await refuse(send, 413, _too_large(limit))
                    return
        seen = 0
        exceeded = False

        async def counted_receive() -> Any:
            nonlocal seen, exceeded
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    exceeded = True
                    raise BodyTooLarge
            return message

        async def guarded_send(message: Any) -> None:
            if not exceeded:  # whatever the app answers after the overflow is replaced
                await send(message)

        try:
            await self.app(scope, counted_receive, guarded_send)
        except BodyTooLarge:
            pass
        except Exception:
            if not exceeded:
                raise
        if exceeded:
            await refuse(send, 413, _too_large(limit))


def _too_large(limit: int) -> str:
    return f"request body too large: the limit is {limit:,} bytes"


async def refuse(send: Any, status: int, message: str, kind: str | None = None) -> None:
    """Answer with the service's error shape, from an ASGI middleware."""
    kind = kind or ("request_too_large" if status == 413 else "bad_request")
    body = json.dumps({"error": {"type": kind, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
