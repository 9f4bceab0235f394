"""Structured access log (one JSON line per request on logger ``medqa.access``) and the last-resort 500.

Logged: request id, method, path (no query string), status, duration, client address, caller id
(``key-<hash>``, never the key), bytes in/out.  Request and response *bodies* are never logged unless
``log_bodies`` is on — clinical questions may contain patient information.

Unhandled exceptions are caught here, so the client gets an OpenAI-style 500 with a request id and
the server log gets the stack without the exception message (which may quote the request).
"""
from __future__ import annotations

import json
import logging
import time
import traceback
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_body

access_log = logging.getLogger("medqa.access")
error_log = logging.getLogger("medqa.serve")

LOGGED_BODY_CHARS = 2000


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp, log_bodies: bool = False):
        self.app, self.log_bodies = app, log_bodies

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = uuid.uuid4().hex[:16]
        state = scope.setdefault("state", {})
        state["request_id"] = rid
        t0 = time.perf_counter()
        status, started, bytes_in, bytes_out = 500, False, 0, 0
        body_sample: list[bytes] = []

        async def receive_counted() -> Message:
            nonlocal bytes_in
            message = await receive()
            if message["type"] == "http.request":
                chunk = message.get("body", b"")
                bytes_in += len(chunk)
                if self.log_bodies and sum(map(len, body_sample)) < LOGGED_BODY_CHARS:
                    body_sample.append(chunk)
            return message

        async def send_tagged(message: Message) -> None:
            nonlocal status, started, bytes_out
            if message["type"] == "http.response.start":
                started, status = True, message["status"]
                message.setdefault("headers", [])
                message["headers"] = list(message["headers"]) + [(b"x-request-id", rid.encode())]
            elif message["type"] == "http.response.body":
                bytes_out += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive_counted, send_tagged)
        except Exception as exc:  # noqa: BLE001 - the last line of defence: no traceback reaches the client
            self._log_exception(rid, scope, exc)
            if not started:
                body = json.dumps(error_body(500, f"internal server error (request id {rid}); "
                                                  "the server log has details")).encode()
                await send_tagged({"type": "http.response.start", "status": 500,
                                   "headers": [(b"content-type", b"application/json"),
                                               (b"content-length", str(len(body)).encode())]})
                await send_tagged({"type": "http.response.body", "body": body})
        finally:
            record = {
                "event": "access", "request_id": rid, "method": scope.get("method"), "path": scope.get("path"),
                "status": status, "ms": round((time.perf_counter() - t0) * 1000, 2),
                "client": (scope.get("client") or ("-", 0))[0], "caller": state.get("key_id", "-"),
                "bytes_in": bytes_in, "bytes_out": bytes_out,
            }
            if self.log_bodies:
                record["body"] = b"".join(body_sample)[:LOGGED_BODY_CHARS].decode("utf-8", "replace")
            access_log.info(json.dumps(record, separators=(",", ":")))

    def _log_exception(self, rid: str, scope: Scope, exc: BaseException) -> None:
        if self.log_bodies:
            error_log.error("unhandled error request_id=%s path=%s", rid, scope.get("path"), exc_info=exc)
            return
        stack = "".join(traceback.format_tb(exc.__traceback__))
        error_log.error("unhandled error request_id=%s path=%s: %s (message withheld; set MEDQA_LOG_BODIES=1 "
                        "to log it)\n%s", rid, scope.get("path"), type(exc).__name__, stack)
