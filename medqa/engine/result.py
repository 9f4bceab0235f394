"""The answer schema (``medqa.answer/1``) and the rules that turn option probabilities into a verdict.

Everything a human or a machine sees about one answer is an :class:`AnswerResult`; the CLI's
``--json``, ``medqa predict`` rows and the HTTP API all serialise this one model, so its field names
are a public contract.  Adding an optional field keeps version 1 (readers must ignore unknown fields,
and these models do); renaming or removing one, or changing a meaning, bumps ``SCHEMA_VERSION``.
``docs/answer_schema.md`` documents it.
"""
from __future__ import annotations

import math
import re
from typing import Literal, Optional, Sequence

from pydantic import BaseModel, Field

from ..records import LETTERS

SCHEMA_VERSION = "medqa.answer/1"

DISCLAIMER = (
    "Not medical advice: an automated answer from a language model, for education and research only. "
    "It can be wrong. Consult a qualified clinician for any medical decision."
)

# Confidence labels from the (calibrated) probability of the chosen option.  Fixed cut-offs rather
# than chance-relative ones, so a label means the same thing for 2-option and 5-option questions.
HIGH_CONFIDENCE = 0.75  # confidence >= 0.75 -> "high"
MEDIUM_CONFIDENCE = 0.5  # 0.5 <= confidence < 0.75 -> "medium"; below -> "low"
# Without a conformal threshold, an option is "plausible" when its probability is at least this
# fraction of the top option's.
PLAUSIBLE_FRACTION = 0.5

ConfidenceLabel = Literal["high", "medium", "low"]
AbstainReason = Literal["low_confidence", "conformal_set"]


class Passage(BaseModel):
    """One retrieved evidence passage, as shown to the model in the prompt's context block."""

    id: str = Field(description="Passage id; explanations cite it as [id].")
    text: str
    score: Optional[float] = Field(None, description="Retriever score (higher = more relevant).")
    source: str = Field("", description="Where the passage comes from (file, corpus or URL).")


class AnswerResult(BaseModel):
    """One answered multiple-choice question (schema ``medqa.answer/1``)."""

    schema_version: Literal["medqa.answer/1"] = SCHEMA_VERSION
    id: str = Field(description="The item id (input id for `medqa predict`; a content hash for `medqa ask`).")
    question: str
    options: list[str] = Field(description="The 2-5 options, in letter order A, B, ...")
    answer_letter: str = Field(description="Letter of the top-scoring option (the best guess even when abstained).")
    answer_text: str = Field(description="Text of that option.")
    probabilities: dict[str, float] = Field(
        description="Probability of every option, keyed by letter; sums to 1 over the given options."
    )
    confidence: float = Field(description="Probability of the chosen option (the maximum of `probabilities`).")
    confidence_label: ConfidenceLabel = Field(
        description=f"high: confidence >= {HIGH_CONFIDENCE}; medium: >= {MEDIUM_CONFIDENCE}; low: below."
    )
    abstained: bool = Field(description="True when the engine declines to commit to one answer.")
    abstain_reason: Optional[AbstainReason] = Field(
        None,
        description="low_confidence: confidence < the abstention threshold; "
        "conformal_set: the calibrated prediction set holds more than one option. Null when not abstained.",
    )
    abstain_below: float = Field(description="Abstention threshold in force: abstain when confidence < this.")
    conformal_qhat: Optional[float] = Field(
        None, description="Conformal threshold in force (set = {k : p_k >= 1 - qhat}); null when not configured."
    )
    plausible: list[str] = Field(
        description="Letters that remain plausible, most probable first: the conformal prediction set when a "
        f"conformal threshold is configured, else every option with p >= {PLAUSIBLE_FRACTION} x the top p."
    )
    explanation: str = Field("", description="Generated explanation of the chosen answer; empty when not requested.")
    citations: list[str] = Field(
        default_factory=list, description="Ids of retrieved passages cited as [id] in the explanation."
    )
    evidence: list[Passage] = Field(default_factory=list, description="Passages retrieved for this question.")
    temperature: float = Field(description="Temperature the option logits were divided by (1.0 = uncalibrated).")
    calibrated: bool = Field(description="True when the temperature came from a saved calibration.")
    model: str = Field("", description="Model (and adapter) that produced the answer.")
    gold_letter: Optional[str] = Field(None, description="Correct letter when the input had one (`medqa predict`).")
    correct: Optional[bool] = Field(None, description="answer_letter == gold_letter, when gold is known.")
    disclaimer: str = Field(DISCLAIMER, description="Safety note shown with every human-facing answer.")


def confidence_label(p: float) -> ConfidenceLabel:
    if p >= HIGH_CONFIDENCE:
        return "high"
    return "medium" if p >= MEDIUM_CONFIDENCE else "low"


def plausible_letters(probs: Sequence[float], conformal_qhat: float | None = None) -> list[str]:
    """Plausible option letters, most probable first; never empty (the top option is always in).

    With ``conformal_qhat`` this is the split-conformal (LAC) set ``{k : p_k >= 1 - qhat}``, the same set as
    :func:`medqa.evaluation.calibration.prediction_set`.
    """
    order = sorted(range(len(probs)), key=lambda k: (-probs[k], k))
    if conformal_qhat is not None:
        keep = [k for k in order if probs[k] >= 1.0 - conformal_qhat - 1e-12]  # as calibration.prediction_set
    else:
        keep = [k for k in order if probs[k] >= PLAUSIBLE_FRACTION * probs[order[0]]]
    if order[0] not in keep:
        keep.insert(0, order[0])
    return [LETTERS[k] for k in keep]


def decide(
    probs: Sequence[float], abstain_below: float, conformal_qhat: float | None = None
) -> tuple[int, list[str], Optional[AbstainReason]]:
    """(chosen index, plausible letters, abstain reason or None) for one row of probabilities.

    The chosen option is the arg-max (ties go to the earliest letter); abstention happens when its
    probability is strictly below ``abstain_below``, or when a conformal set has more than one option.
    """
    if not probs or any(not math.isfinite(p) for p in probs):
        raise ValueError(f"invalid probability row {list(probs)!r}")
    best = max(range(len(probs)), key=lambda k: (probs[k], -k))
    plausible = plausible_letters(probs, conformal_qhat)
    reason: Optional[AbstainReason] = None
    if probs[best] < abstain_below:
        reason = "low_confidence"
    elif conformal_qhat is not None and len(plausible) > 1:
        reason = "conformal_set"
    return best, plausible, reason


_CITATION = re.compile(r"\[([^\[\]\n]{1,200})\]")


def extract_citations(text: str, allowed: Sequence[str]) -> list[str]:
    """Ids cited as ``[id]`` (or ``[id1, id2]``) in ``text`` that are among ``allowed``, first-cited first.

    Anything else in brackets — an invented id, a reference number — is not a citation.
    """
    allowed_set, found = set(allowed), []
    for m in _CITATION.finditer(text):
        for part in re.split(r"[,;]\s*", m.group(1)):
            pid = part.strip()
            if pid in allowed_set and pid not in found:
                found.append(pid)
    return found
