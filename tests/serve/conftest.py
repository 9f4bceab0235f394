"""Fixtures for the serve tests; shared helpers live in serve_helpers.py (a unique module name:
``from conftest import`` is ambiguous when several test folders have a conftest.py)."""
from serve_helpers import client, embedded_engine, server, tiny_engine  # noqa: F401
