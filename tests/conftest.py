"""Shared pytest fixtures.  Other test packages append their fixtures below."""
from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository root (the folder holding ``medqa/`` and ``tests/``)."""
    return Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def shared_data(repo_root: Path) -> Path:
    """The real benchmark files in ``../shared/data`` (never copied into the repo).

    CI always has them, so a missing folder fails loudly instead of silently skipping tests.
    """
    path = (repo_root / ".." / "shared" / "data").resolve()
    if not (path / "PROVENANCE.md").is_file():
        pytest.fail(f"benchmark data not found at {path}; expected ../shared/data next to the repo", pytrace=False)
    return path
