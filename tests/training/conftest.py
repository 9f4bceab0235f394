"""Fixtures for the training tests; shared helpers live in train_helpers.py (a unique module name:
``from conftest import`` is ambiguous when several test folders have a conftest.py)."""
from train_helpers import tiny_model_dir  # noqa: F401
