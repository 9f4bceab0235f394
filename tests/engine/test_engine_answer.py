"""Answers come from option scores: probabilities, arg-max, calibration, abstention, input validation."""
from __future__ import annotations

import math

import pytest
from engine_helpers import ScriptedTokens, logits_for

from medqa.engine import (DISCLAIMER, SCHEMA_VERSION, AnswerResult, Engine, confidence_label, make_item,
                          plausible_letters)
from medqa.records import MedQAError
from medqa.scoring import DummyScorer

Q = "Which drug is first-line for absence seizures?"
OPTS = ["Ethosuximide", "Phenytoin", "Carbamazepine", "Gabapentin"]


def test_probabilities_sum_to_one_over_the_given_options(dummy_engine):
    for n in (2, 3, 4, 5):
        engine = dummy_engine(lambda item: [0.3 * k - 1.0 for k in range(len(item.options))])
        res = engine.answer(Q, [f"option {k}" for k in range(n)], explain=False)
        assert list(res.probabilities) == list("ABCDE"[:n])
        assert math.isclose(sum(res.probabilities.values()), 1.0, abs_tol=1e-9)
        assert all(0.0 <= p <= 1.0 for p in res.probabilities.values())


@pytest.mark.parametrize("best", [0, 1, 2, 3])
def test_chosen_option_is_the_argmax(dummy_engine, best):
    logits = [0.0, 0.5, -1.0, 0.2]
    logits[best] = 3.0
    res = dummy_engine(lambda item: logits).answer(Q, OPTS, explain=False)
    probs = list(res.probabilities.values())
    assert res.answer_letter == "ABCD"[best] and res.answer_text == OPTS[best]
    assert res.confidence == max(probs) == probs[best]


def test_ties_go_to_the_earliest_letter(dummy_engine):
    res = dummy_engine(lambda item: [0.0, 1.0, 1.0, 0.0]).answer(Q, OPTS, explain=False)
    assert res.answer_letter == "B"


def test_answer_never_comes_from_generated_text(dummy_engine, tiny_bundle):
    """The seed's parser read "THE ANSWER IS B" as A; here the text cannot move the answer at all."""
    tok = tiny_bundle.tokenizer
    script = ScriptedTokens(tok("The answer is A. A", add_special_tokens=False)["input_ids"] + [tok.eos_token_id])
    engine = dummy_engine(lambda item: [0.0, 4.0, 0.0, 0.0])
    res = engine.answer(Q, OPTS, explain=False)
    item = make_item(Q, OPTS)
    res.explanation = engine.explain(item, 1, logits_processor=script)
    assert res.answer_letter == "B" and "answer is A" in res.explanation


def test_temperature_calibrates_probabilities_but_keeps_the_answer(dummy_engine):
    fn = lambda item: [2.0, 0.0, -1.0, -1.0]  # noqa: E731
    raw = dummy_engine(fn).answer(Q, OPTS, explain=False)
    soft = dummy_engine(fn, temperature=2.0).answer(Q, OPTS, explain=False)
    assert soft.answer_letter == raw.answer_letter == "A"
    assert soft.confidence < raw.confidence
    assert soft.calibrated and not raw.calibrated and soft.temperature == 2.0 and raw.temperature == 1.0
    expected = [math.exp(x / 2.0) for x in fn(None)]
    assert math.isclose(soft.probabilities["A"], expected[0] / sum(expected), rel_tol=1e-9)


def test_abstention_triggers_below_the_threshold(dummy_engine):
    at = dummy_engine(lambda item: logits_for(0.5, 0.3, 0.2), abstain_below=0.5).answer(Q, OPTS[:3], explain=False)
    assert not at.abstained and at.abstain_reason is None  # exactly at the threshold: answer
    below = dummy_engine(lambda item: logits_for(0.49, 0.31, 0.2), abstain_below=0.5).answer(Q, OPTS[:3], explain=False)
    assert below.abstained and below.abstain_reason == "low_confidence" and below.abstain_below == 0.5
    assert below.answer_letter == "A"  # the best guess is still reported, flagged as abstained
    assert below.plausible == ["A", "B"]  # 0.2 < 0.5 * 0.49: not plausible
    never = dummy_engine(lambda item: logits_for(0.25, 0.25, 0.25, 0.25), abstain_below=0.0).answer(Q, OPTS, explain=False)
    assert not never.abstained


def test_conformal_set_with_more_than_one_option_abstains(dummy_engine):
    fn = lambda item: logits_for(0.6, 0.3, 0.1)  # noqa: E731
    wide = dummy_engine(fn, abstain_below=0.0, conformal_qhat=0.75).answer(Q, OPTS[:3], explain=False)
    assert wide.abstained and wide.abstain_reason == "conformal_set" and wide.plausible == ["A", "B"]
    narrow = dummy_engine(fn, abstain_below=0.0, conformal_qhat=0.5).answer(Q, OPTS[:3], explain=False)
    assert not narrow.abstained and narrow.plausible == ["A"]


def test_plausible_and_confidence_label_rules():
    assert plausible_letters([0.1, 0.5, 0.3, 0.1]) == ["B", "C"]
    assert plausible_letters([0.1, 0.5, 0.3, 0.1], conformal_qhat=0.0) == ["B"]  # never empty
    assert plausible_letters([0.1, 0.5, 0.3, 0.1], conformal_qhat=1.0) == ["B", "C", "A", "D"]
    assert [confidence_label(p) for p in (0.9, 0.75, 0.74, 0.5, 0.49)] == ["high", "high", "medium", "medium", "low"]


def test_result_schema_is_versioned_and_carries_the_disclaimer(dummy_engine):
    res = dummy_engine(lambda item: [1.0, 0.0]).answer(Q, OPTS[:2], explain=False)
    data = res.model_dump(mode="json")
    assert data["schema_version"] == SCHEMA_VERSION == "medqa.answer/1"
    assert data["disclaimer"] == DISCLAIMER and DISCLAIMER.startswith("Not medical advice")
    assert AnswerResult.model_validate_json(res.model_dump_json()) == res
    assert res.id == make_item(Q, OPTS[:2]).id  # stable content id for ad-hoc questions


def test_batch_keeps_ids_order_and_gold(dummy_engine):
    from medqa.records import MCQItem

    engine = dummy_engine(lambda item: [1.0 if item.id.isdigit() and k == int(item.id) % 3 else 0.0 for k in range(3)])
    items = [MCQItem(id=str(i), question=f"q{i}?", options=["x", "y", "z"], answer=1) for i in range(5)]
    items.append({"question": "mapping form?", "options": ["x", "y", "z"], "id": "m"})
    res = engine.answer_batch(items)
    assert [r.id for r in res] == ["0", "1", "2", "3", "4", "m"]
    assert [r.answer_letter for r in res[:5]] == ["A", "B", "C", "A", "B"]
    assert [r.correct for r in res[:5]] == [False, True, False, False, True] and res[5].correct is None
    assert engine.scorer.calls == 1  # one scoring call for the whole batch
    assert engine.answer_batch([]) == []


def test_options_inline_in_the_question(dummy_engine):
    res = dummy_engine(lambda item: [0.0, 2.0]).answer("Which one? A) heart B) lung", explain=False)
    assert res.question == "Which one?" and res.options == ["heart", "lung"] and res.answer_text == "lung"


@pytest.mark.parametrize("question, options, match", [
    ("Which?", ["only one"], "found 1 option"),
    ("Which?", ["a", "b", "c", "d", "e", "f"], "found 6 options.*at most 5"),
    ("   ", ["a", "b"], "question is empty"),
    ("Which?", ["a", "  "], "option B is empty"),
    ("Which?", None, "no options given"),
])
def test_bad_questions_get_clear_errors(dummy_engine, question, options, match):
    engine = dummy_engine()
    with pytest.raises(MedQAError, match=match):
        engine.answer(question, options, explain=False)
    assert engine.scorer.calls == 0  # rejected before any model work


def test_bad_engine_settings_are_rejected(tiny_bundle):
    scorer = DummyScorer()
    for kw, match in [({"abstain_below": 1.5}, "abstain-below"), ({"temperature": 0}, "temperature"),
                      ({"conformal_qhat": -0.1}, "conformal"), ({"threads": -1}, "threads"), ({"rag_k": -1}, "rag-k")]:
        with pytest.raises(MedQAError, match=match):
            Engine(tiny_bundle, scorer, **kw)
    with pytest.raises(MedQAError, match="search"):
        Engine(tiny_bundle, scorer, retriever=object())
    with pytest.raises(MedQAError, match="bundle"):
        Engine()


def test_scorer_rows_are_checked(dummy_engine):
    engine = dummy_engine(lambda item: [0.0, 1.0])
    with pytest.raises(MedQAError, match="invalid row"):
        engine.answer(Q, OPTS[:3], explain=False)


def test_engine_without_model_answers_but_cannot_generate():
    engine = Engine(scorer=DummyScorer(lambda item: [0.0, 1.0]))
    assert engine.answer(Q, OPTS[:2], explain=False).answer_letter == "B"
    with pytest.raises(MedQAError, match="no generative model"):
        engine.answer(Q, OPTS[:2], explain=True)
