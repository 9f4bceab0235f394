"""The one record type every dataset maps to, and the error type for bad user data."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

LETTERS = "ABCDE"
MIN_OPTIONS, MAX_OPTIONS = 2, 5


class MedQAError(Exception):
    """An error caused by user input or environment, printed to the user without a traceback.

    The message must say what is wrong and how to fix it.
    """


class DataError(MedQAError):
    """Bad input data. ``where`` is ``file:line`` (or ``file``) and ``field`` names the offending field."""

    def __init__(self, message: str, where: str | None = None, field: str | None = None):
        self.where, self.field, self.reason = where, field, message
        prefix = where or ""
        if field:
            prefix = f"{prefix} field '{field}'" if prefix else f"field '{field}'"
        super().__init__(f"{prefix}: {message}" if prefix else message)


@dataclass
class MCQItem:
    """One multiple-choice question, whatever dataset it came from.

    ``answer`` is a 0-based index into ``options`` (None for unlabeled items, e.g. user questions);
    ``context`` holds task-defined evidence (PubMedQA abstracts); ``explanation`` may be empty.
    """

    id: str
    question: str
    options: list[str]
    answer: int | None = None
    explanation: str = ""
    subject: str = ""
    context: str = ""
    source: str = ""  # dataset name, e.g. "medmcqa"
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, where: str | None = None) -> None:
        if not isinstance(self.question, str) or not self.question.strip():
            raise DataError("question is empty; every item needs question text", where, "question")
        if not isinstance(self.options, list) or not (MIN_OPTIONS <= len(self.options) <= MAX_OPTIONS):
            n = len(self.options) if isinstance(self.options, list) else "no"
            raise DataError(
                f"has {n} options; between {MIN_OPTIONS} and {MAX_OPTIONS} are supported", where, "options"
            )
        for i, opt in enumerate(self.options):
            if not isinstance(opt, str) or not opt.strip():
                raise DataError(f"option {LETTERS[i]} is empty", where, "options")
        if self.answer is not None:
            if isinstance(self.answer, bool) or not isinstance(self.answer, int) or not (
                0 <= self.answer < len(self.options)
            ):
                raise DataError(
                    f"answer index {self.answer!r} is out of range for {len(self.options)} options", where, "answer"
                )

    @property
    def letters(self) -> str:
        return LETTERS[: len(self.options)]

    @property
    def answer_letter(self) -> str | None:
        return None if self.answer is None else LETTERS[self.answer]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "MCQItem":
        known = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        return cls(**known)
