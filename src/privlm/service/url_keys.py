"""Keys at the door. API keys never travel in a URL. A URL is written to access logs, proxies
and browser history, so a request whose query string carries a key, or a parameter named
like one, is refused with 400 before it reaches any route; the refusal never repeats the
URL. privlm's own access log (``AccessLog``) writes the method, the path and the status,
never the query string. An upload without a valid key is refused before its body is read
(``KeyBeforeBody``)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

from starlette.concurrency import run_in_threadpool

from privlm.service.keys import KEY_PREFIX
from privlm.service.limits import refuse

KEY_PARAMETERS = frozenset({"api_key", "apikey", "key", "token", "access_token", "authorization"})
REFUSAL = (
    "an API key in a URL is refused (URLs are logged and cached); send it in the header "
    "Authorization: Bearer <key>, and revoke a key that was sent this way (DELETE "
    "/v1/keys/{prefix}, or privlm service keys revoke)"
)
log = logging.getLogger("privlm.service.access")


def carries_key(query_string: bytes) -> bool:
    """Whether a query string holds a key-like parameter or a privlm key anywhere."""
    text = query_string.decode("latin-1")
    if KEY_PREFIX in text:
        return True
    return any(name.lower() in KEY_PARAMETERS for name, _ in parse_qsl(text, True))


class KeysNotInUrls:
    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and carries_key(scope.get("query_string", b"")):
            await refuse(send, 400, REFUSAL, "invalid_request")
            log.info("%s %s 400 (key in URL refused)", scope.get("method"), scope.get("path"))
            return
        await self.app(scope, receive, send)


class AccessLog:
    """One line per request: method, path (never the query string) and status."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def noted(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, noted)
        finally:
            log.info("%s %s %s", scope.get("method"), scope.get("path"), status)


def bearer_key(scope: dict[str, Any]) -> str | None:
    """The key of an ``Authorization: Bearer <key>`` header (any case), or None."""
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            scheme, _, key = value.decode("latin-1").strip().partition(" ")
            return key.strip() or None if scheme.lower() == "bearer" else None
    return None


class KeyBeforeBody:
    """An upload (``POST`` to one of ``paths``) without a valid key is refused with 401
    before its body is read: a stranger cannot make the server take in 20 MB. ``known``
    says whether a key belongs to a tenant (a database lookup, run off the event loop)."""

    def __init__(self, app: Any, known: Callable[[str], bool], paths: tuple[str, ...]) -> None:
        self.app, self.known, self.paths = app, known, paths

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and scope.get("method") == "POST"
            and scope.get("path") in self.paths
        ):
            key = bearer_key(scope)
            if key is None:
                await refuse(
                    send, 401, "send an API key: Authorization: Bearer <key>", "unauthorized"
                )
                return
            if not await run_in_threadpool(self.known, key):
                await refuse(send, 401, "unknown or revoked API key", "unauthorized")
                return
        await self.app(scope, receive, send)
