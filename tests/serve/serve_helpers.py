"""Fixtures for the serving tests: a tiny-model Engine and a real uvicorn server on a free loopback port."""
from __future__ import annotations

import contextlib
import os
from typing import Iterator

import pytest

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

API_KEY = "test-key-0123456789"


def tiny_bundle():
    from medqa.device import detect_device
    from medqa.modeling import ModelBundle, prepare_tokenizer
    from medqa.testing import tiny_model, tiny_tokenizer

    tok = tiny_tokenizer()
    prepare_tokenizer(tok)
    model = tiny_model(tok, seed=0)
    return ModelBundle(model, tok, detect_device("cpu"), "float32", "tiny", "tiny")


@pytest.fixture(scope="session")
def tiny_engine():
    """A real Engine (HF scorer + generation) over a random ~100k-parameter model: fast, offline."""
    from medqa.engine import Engine

    return Engine(tiny_bundle())


@pytest.fixture(scope="session")
def embedded_engine():
    """The embedded Gemma 3 270M default model (real_model tests only)."""
    from medqa.engine import Engine

    return Engine.load("embedded", device="cpu")


@contextlib.contextmanager
def running(engine, **settings) -> Iterator[str]:
    """``create_app(engine, ServeSettings(**settings))`` served by uvicorn on a free loopback port."""
    from medqa.serve.app import create_app
    from medqa.serve.server import serve_in_thread
    from medqa.serve.settings import ServeSettings

    app = create_app(engine, ServeSettings(**settings))
    with serve_in_thread(app) as url:
        yield url


@pytest.fixture(scope="module")
def server(tiny_engine) -> Iterator[str]:
    """Base URL of a keyed server over the tiny engine (rate limit off so tests do not interfere)."""
    with running(tiny_engine, api_keys=[API_KEY], rate_limit_per_min=0, max_body_bytes=16 * 1024,
                 max_tokens=64) as url:
        yield url


@pytest.fixture()
def client(server):
    from openai import OpenAI

    c = OpenAI(base_url=server + "/v1", api_key=API_KEY, max_retries=0, timeout=60)
    yield c
    c.close()


def no_traceback(text: str) -> None:
    """Assert an error body carries no stack trace or exception repr."""
    for marker in ("Traceback", 'File "', "line ", "Error(", ".py"):
        assert marker not in text, f"{marker!r} leaked into an error body: {text[:300]}"
