"""The service's error responses: JSON ``{"error": {"type", "message"}}``, never echoing
what was sent, for every exception a route can raise."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from privlm.errors import PrivlmError
from privlm.service.api_errors import ApiError, SafeJSONResponse

log = logging.getLogger("privlm.service")


def _error(kind: str, message: str, status: int) -> JSONResponse:
    return SafeJSONResponse({"error": {"type": kind, "message": message}}, status)


async def _api_error(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ApiError)
    return SafeJSONResponse(exc.body(), exc.status, headers=exc.headers)


async def _http(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    body = {"error": {"type": kind, "message": str(exc.detail)}}
    return SafeJSONResponse(body, exc.status_code, headers=exc.headers)


async def _unencodable(_: Request, exc: Exception) -> JSONResponse:
    return _error(
        "invalid_request",
        "the request holds text that cannot be encoded as UTF-8 (a lone surrogate)",
        400,
    )


async def _invalid(_: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in exc.errors()
    )
    return _error("invalid_request", problems, 400)


async def _privlm(_: Request, exc: Exception) -> JSONResponse:
    return _error("invalid_request", str(exc), 400)


async def _internal(_: Request, exc: Exception) -> JSONResponse:
    log.error("internal error: %s", type(exc).__name__)
    return JSONResponse({"error": {"type": "internal_error", "message": type(exc).__name__}}, 500)


def install_error_handlers(app: FastAPI) -> None:
    """Every error as JSON, the most specific handler first."""
    app.add_exception_handler(ApiError, _api_error)
    app.add_exception_handler(StarletteHTTPException, _http)
    app.add_exception_handler(UnicodeError, _unencodable)
    app.add_exception_handler(RequestValidationError, _invalid)
    app.add_exception_handler(PrivlmError, _privlm)
    app.add_exception_handler(Exception, _internal)
