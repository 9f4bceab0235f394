"""Request limits: a body-size ASGI middleware (413) and a per-key token-bucket rate limit (429).

The body limit is enforced before any route or JSON parsing runs: a declared ``Content-Length`` over
the limit is refused at once, and a chunked body is counted while it is read (it is buffered only up
to the limit, which is small).
"""
from __future__ import annotations

import json
import math
import threading
import time

from fastapi import Depends, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .auth import require_api_key
from .errors import APIError, error_body


class BodySizeLimitMiddleware:
    """Reject request bodies larger than ``max_bytes`` with an OpenAI-style 413."""

    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app, self.max_bytes = app, max_bytes

    async def _reject(self, send: Send, declared: int | None) -> None:
        size = f"{declared} bytes" if declared is not None else "more than that"
        body = json.dumps(error_body(
            413, f"request body is {size}; the limit is {self.max_bytes} bytes. Send a shorter question/prompt "
                 "(or raise the server's --max-body-bytes / MEDQA_MAX_BODY_BYTES)")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = None
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = None
                break
        if declared is not None and declared > self.max_bytes:
            await self._reject(send, declared)
            return
        if scope.get("method") in ("GET", "HEAD", "OPTIONS", "DELETE"):
            await self.app(scope, receive, send)
            return
        # Read (at most max_bytes of) the body first, then replay it to the app.
        chunks, total = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > self.max_bytes:
                await self._reject(send, None)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later calls wait for disconnect, as the real receive does

        await self.app(scope, replay, send)


class TokenBucket:
    """``capacity`` tokens, refilled at ``rate`` per second; thread-safe."""

    def __init__(self, rate: float, capacity: int):
        self.rate, self.capacity = rate, capacity
        self.tokens, self.stamp = float(capacity), time.monotonic()
        self.lock = threading.Lock()

    def take(self, n: float = 1.0) -> float:
        """Take ``n`` tokens: 0.0 on success, else seconds until they would be available."""
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.tokens >= n:
                self.tokens -= n
                return 0.0
            return (n - self.tokens) / self.rate if self.rate > 0 else math.inf


class RateLimiter:
    """One token bucket per caller id (API key id, or client address without keys)."""

    def __init__(self, per_minute: float, burst: int, max_callers: int = 10_000):
        self.per_minute, self.burst, self.max_callers = per_minute, burst, max_callers
        self.buckets: dict[str, TokenBucket] = {}
        self.lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.per_minute > 0

    def check(self, caller: str) -> float:
        if not self.enabled:
            return 0.0
        with self.lock:
            bucket = self.buckets.get(caller)
            if bucket is None:
                if len(self.buckets) >= self.max_callers:  # bound memory under address churn
                    self.buckets.clear()
                bucket = self.buckets[caller] = TokenBucket(self.per_minute / 60.0, self.burst)
        return bucket.take()


async def rate_limited(request: Request, caller: str = Depends(require_api_key)) -> str:
    """Dependency for /v1 routes: authenticate, then spend one token of the caller's bucket (or 429)."""
    wait = request.app.state.rate_limiter.check(caller)
    if wait > 0:
        retry = max(1, math.ceil(wait))
        limit = request.app.state.settings.rate_limit_per_min
        raise APIError(429, f"rate limit of {limit:g} requests/minute for this API key exceeded; retry after "
                            f"{retry} s (server: --rate-limit / MEDQA_RATE_LIMIT_PER_MIN)",
                       headers={"Retry-After": str(retry)})
    return caller
