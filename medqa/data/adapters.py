"""One small function per dataset that maps a raw row (a dict) to an :class:`MCQItem`.

Adapters raise :class:`DataError` naming the *source* field (``opb``, ``options.C``, ``cop``), because
that is what the user has to find and fix in their file.  They never let a ``KeyError``/``TypeError``
escape on user data.  The loader fills in ``where`` (``file:line``) from the context.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from ..records import LETTERS, DataError, MCQItem, MedQAError

PUBMEDQA_OPTIONS = ["yes", "no", "maybe"]
MEDMCQA_OPTION_FIELDS = ("opa", "opb", "opc", "opd")


@dataclass
class AdapterContext:
    """What an adapter needs besides the row: where the row came from and file-level decisions."""

    dataset: str
    where: str | None = None
    index: int = 0
    cop_base: int | None = None  # MedMCQA only: 0 (Hub parquet) or 1 (original release)


# --------------------------------------------------------------------------- field helpers


def require(row: dict, key: str, ctx: AdapterContext) -> Any:
    """The value of ``key``; a missing key is a bad row, not a KeyError."""
    if key not in row:
        raise DataError(f"missing field (the row has: {', '.join(map(str, row)) or 'no fields'})", ctx.where, key)
    return row[key]


def as_text(value: Any, ctx: AdapterContext, key: str, *, required: bool = True) -> str:
    """A string field.  Numbers are accepted (an option may be ``5``); lists/dicts are not text."""
    if value is None or (isinstance(value, float) and value != value):  # None or NaN (pandas/CSV)
        value = ""
    if isinstance(value, bool) or isinstance(value, (list, dict)):
        raise DataError(f"expected text, got {type(value).__name__} {_short(value)}", ctx.where, key)
    text = value if isinstance(value, str) else str(value)
    if required and not text.strip():
        raise DataError("is empty", ctx.where, key)
    return text


def text_field(row: dict, key: str, ctx: AdapterContext) -> str:
    """A required, non-empty text field."""
    return as_text(require(row, key, ctx), ctx, key)


def optional_text(row: dict, *keys: str) -> str:
    """The first present, non-null optional text field among ``keys``, else ``""``."""
    for key in keys:
        value = row.get(key)
        if value is None or isinstance(value, (list, dict, bool)) or (isinstance(value, float) and value != value):
            continue
        return str(value)
    return ""


def as_int(value: Any) -> int | None:
    """``value`` as an int if it is one in any reasonable encoding (``2``, ``2.0``, ``"2"``), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def letter_index(value: Any, n: int, ctx: AdapterContext, key: str) -> int:
    """A letter answer (``"C"``, ``" c "``) as a 0-based index into ``n`` options."""
    letters = LETTERS[:n]
    letter = value.strip().upper() if isinstance(value, str) else ""
    if len(letter) == 1 and letter in letters:
        return letters.index(letter)
    raise DataError(f"answer {_short(value)} is not one of the letters {', '.join(letters)}", ctx.where, key)


def int_index(value: Any, n: int, ctx: AdapterContext, key: str, *, base: int = 0) -> int:
    """An integer answer with the given ``base`` as a 0-based index into ``n`` options."""
    number = as_int(value)
    if number is None:
        raise DataError(f"answer {_short(value)} is not an integer", ctx.where, key)
    index = number - base
    if not 0 <= index < n:
        valid = f"{base}..{base + n - 1}"
        raise DataError(f"answer {number} is out of range ({valid} for {n} options, {base}-based)", ctx.where, key)
    return index


def letter_or_int_index(value: Any, n: int, ctx: AdapterContext, key: str) -> int:
    """A letter (``"B"``) or a 0-based integer (``1``, as ``MCQItem.to_dict`` writes)."""
    if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
        return letter_index(value, n, ctx, key)
    return int_index(value, n, ctx, key, base=0)


def stable_id(dataset: str, *parts: Any) -> str:
    """A content-derived id for rows that carry none, identical across runs and machines."""
    digest = hashlib.sha1("\x1f".join(map(str, parts)).encode("utf-8")).hexdigest()[:12]
    return f"{dataset}-{digest}"


def row_id(row: dict, keys: Iterable[str], dataset: str, *content: Any) -> str:
    """The row's own id under one of ``keys`` if present, else :func:`stable_id` of ``content``."""
    for key in keys:
        value = row.get(key)
        if value is not None and str(value).strip():
            return str(value).strip()
    return stable_id(dataset, *content)


def _short(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- adapters


def medmcqa(row: dict, ctx: AdapterContext) -> MCQItem:
    """MedMCQA: ``question, opa..opd, cop, exp, subject_name, topic_name, id, choice_type``.

    ``cop`` is 1-based in the original release and 0-based on the Hub; the loader decides which
    (``ctx.cop_base``) for the whole file, so this function never guesses per row.
    """
    if ctx.cop_base not in (0, 1):
        raise MedQAError("MedMCQA needs to know whether 'cop' is 0- or 1-based; set cop_base=0 or 1")
    question = text_field(row, "question", ctx)
    options = [text_field(row, key, ctx) for key in MEDMCQA_OPTION_FIELDS]
    answer = int_index(require(row, "cop", ctx), len(options), ctx, "cop", base=ctx.cop_base)
    meta = {k: row[k] for k in ("topic_name", "choice_type") if row.get(k) not in (None, "")}
    return MCQItem(
        id=row_id(row, ("id",), "medmcqa", question, *options),
        question=question,
        options=options,
        answer=answer,
        explanation=optional_text(row, "exp"),
        subject=optional_text(row, "subject_name"),
        source="medmcqa",
        meta=meta,
    )


def _medqa_hub(row: dict, ctx: AdapterContext) -> MCQItem:
    """GBaker/MedQA-USMLE-4-options-hf: ``sent1`` (+``sent2``), ``ending0..3``, ``label`` (0-based)."""
    question = " ".join(
        t for t in (text_field(row, "sent1", ctx), optional_text(row, "sent2")) if t.strip()
    )
    keys = [f"ending{i}" for i in range(len(LETTERS)) if f"ending{i}" in row] or ["ending0"]
    options = [text_field(row, key, ctx) for key in keys]
    answer = int_index(require(row, "label", ctx), len(options), ctx, "label", base=0)
    return MCQItem(
        id=row_id(row, ("id",), "medqa", question, *options),
        question=question,
        options=options,
        answer=answer,
        source="medqa",
    )


def medqa(row: dict, ctx: AdapterContext) -> MCQItem:
    """MedQA-USMLE (jind11): ``question, options{A..D(/E)}, answer_idx, answer, meta_info``.

    When ``answer`` (the answer text) is present it must match ``options[answer_idx]``: a mismatch means
    shifted letters, which would silently corrupt accuracy.
    """
    if "sent1" in row and "options" not in row:
        return _medqa_hub(row, ctx)
    question = text_field(row, "question", ctx)
    raw = require(row, "options", ctx)
    if not isinstance(raw, dict):
        raise DataError(f"expected an object {{'A': ..., 'B': ...}}, got {type(raw).__name__}", ctx.where, "options")
    letters = LETTERS[: len(raw)]
    if sorted(str(k).upper() for k in raw) != list(letters):
        raise DataError(f"option keys {sorted(raw)} are not {', '.join(letters)}", ctx.where, "options")
    by_letter = {str(k).upper(): v for k, v in raw.items()}
    options = [as_text(by_letter[L], ctx, f"options.{L}") for L in letters]
    answer = letter_index(require(row, "answer_idx", ctx), len(options), ctx, "answer_idx")
    stated = row.get("answer")
    if isinstance(stated, str) and stated.strip() and stated.strip().casefold() != options[answer].strip().casefold():
        raise DataError(
            f"answer_idx {letters[answer]} is {options[answer]!r} but 'answer' says {stated!r}", ctx.where, "answer_idx"
        )
    meta = {"meta_info": row["meta_info"]} if row.get("meta_info") else {}
    return MCQItem(
        id=row_id(row, ("id",), "medqa", question, *options),
        question=question,
        options=options,
        answer=answer,
        source="medqa",
        meta=meta,
    )


def _pubmedqa_contexts(row: dict, ctx: AdapterContext) -> str:
    """Abstract passages: ``CONTEXTS`` list (GitHub release) or ``context.contexts`` (Hub)."""
    key = "CONTEXTS" if "CONTEXTS" in row else "context"
    value = require(row, key, ctx)
    if isinstance(value, dict):
        key, value = f"{key}.contexts", value.get("contexts")
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not any(isinstance(p, str) and p.strip() for p in value):
        raise DataError("expected a non-empty list of abstract passages", ctx.where, key)
    return "\n".join(p.strip() for p in value if isinstance(p, str) and p.strip())


def pubmedqa(row: dict, ctx: AdapterContext) -> MCQItem:
    """PubMedQA PQA-L: yes/no/maybe questions answered from the abstract in ``context``."""
    qkey = "QUESTION" if "QUESTION" in row else "question"
    question = text_field(row, qkey, ctx)
    context = _pubmedqa_contexts(row, ctx)
    decision = as_text(require(row, "final_decision", ctx), ctx, "final_decision").strip().lower()
    if decision not in PUBMEDQA_OPTIONS:
        raise DataError(f"{decision!r} is not one of yes, no, maybe", ctx.where, "final_decision")
    year = row.get("YEAR") or row.get("year")
    return MCQItem(
        id=row_id(row, ("pmid", "pubid", "id"), "pubmedqa", question),
        question=question,
        options=list(PUBMEDQA_OPTIONS),
        answer=PUBMEDQA_OPTIONS.index(decision),
        explanation=optional_text(row, "LONG_ANSWER", "long_answer"),
        context=context,
        source="pubmedqa",
        meta={"year": str(year)} if year else {},
    )


def mmlu(row: dict, ctx: AdapterContext) -> MCQItem:
    """MMLU: ``question, A..D, answer`` (letter, CSV release) or ``question, choices, answer`` (int, Hub)."""
    question = text_field(row, "question", ctx)
    if "choices" in row:
        choices = require(row, "choices", ctx)
        if not isinstance(choices, list):
            raise DataError(f"expected a list, got {type(choices).__name__}", ctx.where, "choices")
        options = [as_text(c, ctx, f"choices[{i}]") for i, c in enumerate(choices)]
        answer = letter_or_int_index(require(row, "answer", ctx), len(options), ctx, "answer")
    else:
        options = [text_field(row, L, ctx) for L in "ABCD"]
        answer = letter_index(require(row, "answer", ctx), len(options), ctx, "answer")
    subject = optional_text(row, "subject")
    return MCQItem(
        id=row_id(row, ("id",), "mmlu", subject, question, *options),
        question=question,
        options=options,
        answer=answer,
        subject=subject,
        source="mmlu",
    )


def _generic_options(row: dict, ctx: AdapterContext) -> list[str]:
    """``options`` as a list, or a JSON-encoded list (the only way to put a list in a CSV cell)."""
    value = require(row, "options", ctx)
    if isinstance(value, str) and value.strip().startswith("["):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise DataError(f"is not a valid JSON list: {e.msg}", ctx.where, "options") from None
    if not isinstance(value, list):
        raise DataError(f"expected a list of option texts, got {type(value).__name__}", ctx.where, "options")
    return [as_text(v, ctx, f"options[{i}]") for i, v in enumerate(value)]


def generic(row: dict, ctx: AdapterContext) -> MCQItem:
    """The native format ``MCQItem.to_dict()`` writes: ``question, options[list], answer`` (+optional fields).

    ``answer`` is a 0-based int or a letter; it may be absent or null for unlabeled questions.
    """
    question = text_field(row, "question", ctx)
    options = _generic_options(row, ctx)
    raw_answer = row.get("answer")
    answer = None if raw_answer in (None, "") else letter_or_int_index(raw_answer, len(options), ctx, "answer")
    meta = row.get("meta")
    if isinstance(meta, str) and meta.strip().startswith("{"):
        try:
            meta = json.loads(meta)
        except json.JSONDecodeError:
            meta = None
    return MCQItem(
        id=row_id(row, ("id",), "generic", question, *options),
        question=question,
        options=options,
        answer=answer,
        explanation=optional_text(row, "explanation"),
        subject=optional_text(row, "subject"),
        context=optional_text(row, "context"),
        source=optional_text(row, "source") or "generic",
        meta=dict(meta) if isinstance(meta, dict) else {},
    )


ADAPTERS: dict[str, Callable[[dict, AdapterContext], MCQItem]] = {
    "medmcqa": medmcqa,
    "medqa": medqa,
    "pubmedqa": pubmedqa,
    "mmlu": mmlu,
    "generic": generic,
}

# Field sets that identify each dataset, checked in this order (medqa before generic: both have options).
SIGNATURES: dict[str, list[tuple[str, ...]]] = {
    "medmcqa": [("opa", "opb", "opc", "opd", "cop")],
    "medqa": [("options", "answer_idx"), ("sent1", "ending0", "ending1", "label")],
    "pubmedqa": [("QUESTION", "final_decision"), ("question", "final_decision")],
    "mmlu": [("question", "A", "B", "C", "D", "answer"), ("question", "choices", "answer")],
    "generic": [("question", "options")],
}


def detect_dataset(fields: Iterable[str]) -> str | None:
    """The adapter whose signature fields are all present, or None."""
    present = set(fields)
    for name, alternatives in SIGNATURES.items():
        if any(set(sig) <= present for sig in alternatives):
            return name
    return None


def expected_fields_text() -> str:
    """Human-readable list of what each adapter expects, for 'unrecognised format' errors."""
    parts = []
    for name, alternatives in SIGNATURES.items():
        alts = " or ".join("(" + ", ".join(sig) + ")" for sig in alternatives)
        parts.append(f"{name}: {alts}")
    return "; ".join(parts)


def get_adapter(name: str) -> Callable[[dict, AdapterContext], MCQItem]:
    """The adapter called ``name``; an unknown name is a user error listing the choices."""
    try:
        return ADAPTERS[name]
    except KeyError:
        raise MedQAError(f"unknown dataset {name!r}; choose one of {', '.join(ADAPTERS)} (--dataset)") from None


def detect_cop_base(values: Iterable[Any], where: str) -> tuple[int, str]:
    """Decide MedMCQA's ``cop`` base from every value in the file; returns (base, reason).

    0 present (and nothing above 3) means 0-based; 4 present (and no 0) means 1-based.  All values in
    {1, 2, 3} could be either, so we refuse to guess: a silent off-by-one would mislabel every answer.
    """
    seen = {n for n in (as_int(v) for v in values) if n is not None and 0 <= n <= 4}
    if 0 in seen and 4 in seen:
        raise DataError(
            "MedMCQA 'cop' values include both 0 and 4, so the file mixes 0-based and 1-based answers; "
            "fix the file or pass --cop-base 0 or --cop-base 1 to treat the other rows as bad",
            where,
            "cop",
        )
    if 0 in seen:
        return 0, "detected 0-based MedMCQA cop (a 0 is present, as in the Hub parquet)"
    if 4 in seen:
        return 1, "detected 1-based MedMCQA cop (a 4 is present, as in the original release)"
    if not seen:
        return 1, "no valid MedMCQA cop values found; assumed 1-based (every row will be reported)"
    raise DataError(
        f"cannot tell whether MedMCQA 'cop' is 0-based or 1-based: every value is in {sorted(seen)}. "
        "The original release (JSON/JSONL) is 1-based (1 = opa), the Hub parquet is 0-based (0 = opa). "
        "Pass --cop-base 1 or --cop-base 0 (cop_base= in Python)",
        where,
        "cop",
    )
