"""Serving: an OpenAI-compatible HTTP API (``medqa serve``) and a Gradio demo (``medqa ui``) over one Engine.

``create_app(engine, settings)`` builds the FastAPI app; heavy imports (torch, gradio) stay out of this
package's import path until used.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from fastapi import FastAPI

    from .settings import ServeSettings

__all__ = ["create_app", "ServeSettings"]


def create_app(engine: Any, settings: "ServeSettings | None" = None) -> "FastAPI":
    from .app import create_app as _create

    return _create(engine, settings)


def __getattr__(name: str) -> Any:
    if name == "ServeSettings":
        from .settings import ServeSettings

        return ServeSettings
    raise AttributeError(name)
