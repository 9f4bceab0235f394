"""OpenAI-style error bodies and the exception handlers that produce them.

Every error leaves the server as ``{"error": {"message", "type", "param", "code"}}`` (the shape the
``openai`` client parses).  Messages say what went wrong and how to fix it; they never contain a
traceback, exception reprs or the request body (which may hold patient text).  Unexpected exceptions
are logged server-side with a request id that the client also receives, so the two can be matched.
"""
from __future__ import annotations

import logging
import traceback
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ..records import MedQAError

log = logging.getLogger("medqa.serve")

# HTTP status -> (OpenAI error type, default code)
ERROR_TYPES: dict[int, tuple[str, str]] = {
    400: ("invalid_request_error", "bad_request"),
    401: ("authentication_error", "invalid_api_key"),
    403: ("permission_error", "forbidden"),
    404: ("not_found_error", "not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    413: ("invalid_request_error", "request_too_large"),
    415: ("invalid_request_error", "unsupported_media_type"),
    422: ("invalid_request_error", "invalid_request"),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", "internal_error"),
    502: ("server_error", "upstream_error"),
    503: ("server_error", "overloaded"),
}


class UpstreamError(MedQAError):
    """The remote model server (``--remote-url``) failed or is unreachable; clients get a 502."""


class APIError(Exception):
    """An error with a client-facing message; raise it from routes or dependencies."""

    def __init__(self, status: int, message: str, code: str | None = None, param: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.headers = status, message, param, headers
        self.code = code or ERROR_TYPES.get(status, ("", "error"))[1]


def error_body(status: int, message: str, code: str | None = None, param: str | None = None) -> dict[str, Any]:
    type_, default_code = ERROR_TYPES.get(status, ("invalid_request_error" if status < 500 else "server_error", "error"))
    return {"error": {"message": message, "type": type_, "param": param, "code": code or default_code}}


def error_response(status: int, message: str, code: str | None = None, param: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, code, param), status_code=status, headers=headers)


def _request_id(request: Request) -> str:
    return str(request.scope.get("state", {}).get("request_id", "-"))


def _loc(loc: tuple | list) -> str:
    parts = [str(p) for p in loc if p not in ("body",)]
    return ".".join(parts) or "body"


def describe_validation_errors(errors: list[dict]) -> tuple[str, str | None]:
    """A short, fixable message from pydantic errors.  The offending *values* are never echoed back."""
    if not errors:
        return "invalid request", None
    msgs, first_param = [], None
    for e in errors[:5]:
        if e.get("type") == "json_invalid":
            ctx = e.get("ctx") or {}
            where = f" (at character {e['loc'][1]})" if len(e.get("loc", ())) > 1 else ""
            return (f"request body is not valid JSON{where}: {ctx.get('error', 'parse error')}; "
                    "send a JSON object with Content-Type: application/json"), None
        loc = _loc(e.get("loc", ()))
        first_param = first_param or loc
        msgs.append(f"{loc}: {e.get('msg', 'invalid')}")
    more = f" (+{len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(msgs) + more + " — see /docs for the request schema", first_param


async def _api_error(request: Request, exc: APIError) -> JSONResponse:
    return error_response(exc.status, exc.message, exc.code, exc.param, exc.headers)


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    status = exc.status_code
    if status == 404:
        message = f"no route {request.url.path}; see /docs for the API (OpenAI-compatible routes live under /v1)"
    elif status == 405:
        message = f"method {request.method} is not allowed on {request.url.path}; see /docs"
    else:
        detail = exc.detail if isinstance(exc.detail, str) else None
        message = detail or "request failed"
    return error_response(status, message, headers=getattr(exc, "headers", None))


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    message, param = describe_validation_errors(list(exc.errors()))
    return error_response(422, message, param=param)


async def _medqa_error(request: Request, exc: MedQAError) -> JSONResponse:
    # MedQAError messages are written for users (what is wrong + how to fix); they echo field names, not bodies.
    return error_response(422, str(exc), code="invalid_input", param=getattr(exc, "field", None))


async def _upstream_error(request: Request, exc: UpstreamError) -> JSONResponse:
    log.warning("upstream model server error request_id=%s (%s)", _request_id(request), getattr(exc, "status", "-"))
    return error_response(502, f"the model server behind this API failed: {exc}", code="upstream_error")


async def _unhandled(request: Request, exc: Exception) -> JSONResponse:
    rid = _request_id(request)
    # Operators get the stack (file/line only: the exception *message* may quote patient text unless
    # log_bodies is on); the client gets a request id only.
    settings = getattr(request.app.state, "settings", None)
    if settings is not None and settings.log_bodies:
        log.error("unhandled error request_id=%s path=%s", rid, request.url.path, exc_info=exc)
    else:
        stack = "".join(traceback.format_tb(exc.__traceback__))
        log.error("unhandled error request_id=%s path=%s: %s (message withheld; set MEDQA_LOG_BODIES=1 to log it)\n%s",
                  rid, request.url.path, type(exc).__name__, stack)
    return error_response(500, f"internal server error (request id {rid}); the server log has details",
                          headers={"x-request-id": rid})


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(APIError, _api_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(UpstreamError, _upstream_error)  # type: ignore[arg-type]
    app.add_exception_handler(MedQAError, _medqa_error)  # type: ignore[arg-type]
    app.add_exception_handler(Exception, _unhandled)
