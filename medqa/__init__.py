"""MedQA: turn a small open LLM into a clinical multiple-choice specialist on any accelerator."""
__version__ = "0.1.0"

from .records import LETTERS, DataError, MCQItem, MedQAError  # noqa: E402,F401
