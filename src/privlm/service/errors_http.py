"""The service's error responses: JSON ``{"error": {"type", "message"}}``, never echoing
what was sent, for every exception a route can raise."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
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


DATABASE_RETRY_AFTER_S = 5


def _database_busy() -> JSONResponse:
    """The database could not be reached in time: everyone's load, not the request's fault,
    so 503 with Retry-After. Nothing leaves before its charge commits, so the failure
    releases nothing unpaid for."""
    message = "the service's database is busy; retry after the Retry-After seconds"
    return SafeJSONResponse(
        {"error": {"type": "overloaded", "message": message}},
        503,
        headers={"Retry-After": str(DATABASE_RETRY_AFTER_S)},
    )


async def _pool_timeout(_: Request, exc: Exception) -> JSONResponse:
    log.warning("database connection pool timed out")
    return _database_busy()


async def _operational(request: Request, exc: Exception) -> JSONResponse:
    """SQLite's lock held past its busy timeout is load too; any other database failure is
    an internal error."""
    if "database is locked" in str(exc):
        log.warning("database locked past its busy timeout")
        return _database_busy()
    return await _internal(request, exc)


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
    app.add_exception_handler(PoolTimeoutError, _pool_timeout)
    app.add_exception_handler(OperationalError, _operational)
    app.add_exception_handler(Exception, _internal)
