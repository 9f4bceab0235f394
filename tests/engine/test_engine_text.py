"""Option-text parsing and the human-readable rendering."""
from __future__ import annotations

import pytest

from medqa.engine import AnswerResult, parse_options_text, split_question_options
from medqa.formatting import format_answer, prob_bar
from medqa.records import MedQAError


@pytest.mark.parametrize("text, expected", [
    ("A) Aspirin B) Heparin C) Warfarin", ["Aspirin", "Heparin", "Warfarin"]),
    ("A. Aspirin\nB. Heparin", ["Aspirin", "Heparin"]),
    ("(A) Aspirin (B) Heparin (C) Warfarin (D) Alteplase (E) Clopidogrel",
     ["Aspirin", "Heparin", "Warfarin", "Alteplase", "Clopidogrel"]),
    ("a) one\nb) two", ["one", "two"]),
    ("A: one  B: two", ["one", "two"]),
    ("Options:\nA) Vitamin B. deficiency\nB) Iron", ["Vitamin B. deficiency", "Iron"]),
    ("A. Vitamin B. B. Iron C. Zinc", ["Vitamin B.", "Iron", "Zinc"]),  # "B." inside option A
    ("A) multi\n   line option B) two", ["multi line option", "two"]),
])
def test_parse_options_text_forms(text, expected):
    assert parse_options_text(text) == expected


@pytest.mark.parametrize("text, match", [
    ("A) only", "found 1 option"),
    ("A) a B) b C) c D) d E) e F) f", "found 6 options"),
    ("", "empty"),
    ("just words", "no option markers"),
    ("Why? A) a B) b", "text before the first option marker"),
])
def test_parse_options_text_errors(text, match):
    with pytest.raises(MedQAError, match=match):
        parse_options_text(text)


def test_split_question_options_keeps_letters_inside_the_question():
    assert split_question_options("True about hepatitis A: A) x B) y") == ("True about hepatitis A:", ["x", "y"])
    assert split_question_options("A 45-year-old man. Which drug? A. Aspirin B. Heparin") == (
        "A 45-year-old man. Which drug?", ["Aspirin", "Heparin"])
    assert split_question_options("No options here") == ("No options here", [])


def result(**kw) -> AnswerResult:
    base = dict(id="q", question="Which?", options=["Aspirin", "Heparin", "Warfarin"], answer_letter="B",
                answer_text="Heparin", probabilities={"A": 0.21, "B": 0.62, "C": 0.17}, confidence=0.62,
                confidence_label="medium", abstained=False, abstain_below=0.5, plausible=["B", "A"],
                explanation="Heparin acts at once.", temperature=1.3, calibrated=True)
    return AnswerResult(**{**base, **kw})


def test_text_rendering_has_bars_explanation_and_disclaimer():
    text = format_answer(result())
    lines = text.splitlines()
    assert lines[0] == "Answer: B) Heparin"
    assert "Confidence: 0.62 (medium; temperature 1.30, calibrated)" in text
    assert "> B) Heparin   ██████░░░░ 0.62" in lines
    assert "  A) Aspirin   ██░░░░░░░░ 0.21" in lines
    assert "Explanation:" in lines and "  Heparin acts at once." in lines
    assert " ".join(lines[-3:]).count("Not medical advice:") == 1 and lines[-1].endswith("medical decision.")


def test_text_rendering_of_an_abstention_lists_plausible_options():
    text = format_answer(result(abstained=True, abstain_reason="low_confidence", confidence=0.4995,
                                probabilities={"A": 0.3, "B": 0.4995, "C": 0.2005}, plausible=["B", "A"]))
    assert text.startswith("No confident answer: the top option scores 0.499, below the 0.5 confidence threshold.")
    assert "Plausible options: B) Heparin (0.50); A) Aspirin (0.30)" in text
    assert "Answer:" not in text and "tentative" in text and "Not medical advice" in text
    conformal = format_answer(result(abstained=True, abstain_reason="conformal_set", conformal_qhat=0.8))
    assert "prediction set still holds 2 options" in conformal


def test_prob_bar():
    assert prob_bar(0.0) == "░" * 10 and prob_bar(1.0) == "█" * 10 and prob_bar(0.62) == "██████░░░░"


def test_schema_doc_matches_the_model(repo_root):
    import json
    import re

    doc = (repo_root / "docs" / "answer_schema.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```json\n(.*?)\n```", doc, flags=re.S)
    assert json.loads(blocks[-1]) == AnswerResult.model_json_schema(), "regenerate docs/answer_schema.md"
    AnswerResult.model_validate_json(blocks[0])  # the example is valid
