"""Server settings: one pydantic-settings object, read from ``MEDQA_*`` environment variables and CLI flags.

``MEDQA_API_KEYS`` takes a comma-separated list (``key1,key2``) or a JSON list.  API keys are
:class:`~pydantic.SecretStr` so they never show up in ``repr``/logs.
"""
from __future__ import annotations

import ipaddress
import json
from typing import Annotated, Any

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from ..records import MedQAError

LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost"}


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; a wildcard (0.0.0.0, ::) or a LAN address is not."""
    h = host.strip().strip("[]").lower()
    if h in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


class ServeSettings(BaseSettings):
    """Everything ``medqa serve`` can be told; env vars use the ``MEDQA_`` prefix (``MEDQA_PORT=9000``)."""

    model_config = SettingsConfigDict(env_prefix="MEDQA_", extra="ignore", validate_default=True)

    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)  # 0 = any free port (tests)
    api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list)
    insecure: bool = False  # allow binding a non-loopback address without API keys
    model_name: str = "medqa"  # the id /v1/models lists and clients pass as ``model``
    max_body_bytes: int = Field(64 * 1024, ge=1024)  # larger bodies -> 413
    max_tokens: int = Field(512, ge=1)  # cap on generated tokens per request -> 422 above
    default_max_tokens: int = Field(128, ge=1)  # when a chat request does not say
    max_prompt_chars: int = Field(16_000, ge=100)  # cap on prompt / question text -> 422 above
    rate_limit_per_min: float = Field(600, ge=0)  # per API key (or client IP without keys); 0 = off
    rate_limit_burst: int | None = Field(None, ge=1)  # bucket size; default: one minute's worth, at least 1
    batch_window_ms: float = Field(5.0, ge=0)  # /v1/mcq requests arriving within this window share one forward
    batch_window_frac: float = Field(0.02, ge=0, le=0.5)  # ... or this fraction of the last batch's duration
    max_batch_window_ms: float = Field(250.0, ge=0)  # cap on that adaptive wait
    max_batch: int = Field(16, ge=1)  # at most this many questions per scoring call
    max_queue: int = Field(1024, ge=1)  # pending MCQ questions before new ones get 503
    generate_concurrency: int = Field(1, ge=1)  # generation calls running at once (the engine serialises anyway)
    explain_max_tokens: int = Field(96, ge=1)  # explanation length when the request does not say
    explain_default: bool = True  # /v1/mcq writes an explanation unless the request says explain=false
    log_bodies: bool = False  # never log request/response text unless explicitly enabled
    ui: bool = False  # mount the Gradio demo at /ui
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list)

    @field_validator("api_keys", "cors_origins", mode="before")
    @classmethod
    def _split_list(cls, v: Any) -> Any:
        if isinstance(v, str):
            s = v.strip()
            if s.startswith("["):
                try:
                    return json.loads(s)
                except json.JSONDecodeError as e:
                    raise ValueError(f"not a JSON list ({e}); use key1,key2 or a JSON list") from e
            return [x.strip() for x in s.split(",") if x.strip()]
        return v

    @field_validator("api_keys")
    @classmethod
    def _keys_long_enough(cls, v: list[SecretStr]) -> list[SecretStr]:
        for k in v:
            if len(k.get_secret_value()) < 8:
                raise ValueError("API keys must be at least 8 characters (generate one: python -c "
                                 "'import secrets; print(secrets.token_urlsafe(32))')")
        return v

    @model_validator(mode="after")
    def _burst_default(self) -> "ServeSettings":
        if self.rate_limit_burst is None:
            self.rate_limit_burst = max(1, int(self.rate_limit_per_min))
        return self

    @property
    def auth_enabled(self) -> bool:
        return bool(self.api_keys)

    def key_values(self) -> list[bytes]:
        return [k.get_secret_value().encode() for k in self.api_keys]

    def check_bind(self) -> None:
        """Refuse a non-loopback bind without API keys unless ``--insecure`` was given."""
        if not self.auth_enabled and not self.insecure and not is_loopback(self.host):
            raise MedQAError(
                f"refusing to listen on {self.host} without API keys: anyone on the network could use the model. "
                "Pass --api-key KEY (or set MEDQA_API_KEYS=key1,key2), bind --host 127.0.0.1, "
                "or pass --insecure if the network is trusted"
            )

    def public_dict(self) -> dict:
        """Settings safe to log/show (keys redacted)."""
        d = self.model_dump(exclude={"api_keys"})
        d["api_keys"] = f"{len(self.api_keys)} configured"
        return d
