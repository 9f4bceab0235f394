"""Bearer API-key authentication as a FastAPI dependency.

Keys are compared with :func:`secrets.compare_digest` against *every* configured key (no early exit),
so timing reveals neither which key nor how much of a key matched.  Routes receive a key id
(``key-<sha256 prefix>``), never the key, for rate limiting and the access log.  With no keys
configured (loopback only, or ``--insecure``), callers are identified by client address.
"""
from __future__ import annotations

import hashlib
import secrets

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from .errors import APIError

_bearer = HTTPBearer(auto_error=False, description="API key: `Authorization: Bearer <key>`")


def key_id(key: bytes) -> str:
    return "key-" + hashlib.sha256(key).hexdigest()[:10]


def check_key(presented: str, keys: list[bytes]) -> bool:
    """Constant-time membership test of ``presented`` in ``keys``."""
    candidate = presented.encode()
    ok = False
    for k in keys:  # deliberately no break
        ok |= secrets.compare_digest(candidate, k)
    return ok


async def require_api_key(request: Request,
                          creds: HTTPAuthorizationCredentials | None = Depends(_bearer)) -> str:
    """Dependency: the caller's id, or 401 with an OpenAI-style error body."""
    settings = request.app.state.settings
    if not settings.auth_enabled:
        ident = f"anon-{request.client.host if request.client else 'unknown'}"
    else:
        if creds is None:
            raise APIError(401, "missing API key: send the header 'Authorization: Bearer <key>' "
                                "(openai client: OpenAI(api_key=...))", code="missing_api_key",
                           headers={"WWW-Authenticate": "Bearer"})
        keys = request.app.state.key_values
        if not check_key(creds.credentials, keys):
            raise APIError(401, "invalid API key: check the key you were given (server: --api-key / MEDQA_API_KEYS)",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})
        ident = key_id(creds.credentials.encode())
    request.state.key_id = ident
    return ident
