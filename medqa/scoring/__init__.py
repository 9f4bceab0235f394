"""Option scoring: the narrow interface every backend implements (HF local, remote OpenAI-compatible, dummy)."""
from .base import DummyScorer, Scorer, softmax_rows  # noqa: F401
