"""The Gradio demo without a browser: rendering of answers/abstentions/evidence, the /ui mount, and UI auth."""
from __future__ import annotations

import httpx
import pytest
from serve_helpers import running

from medqa.engine import AnswerResult, Passage
from medqa.serve.ui import SAMPLES, _format


def _result(**kw) -> AnswerResult:
    base = dict(id="q", question="Which vitamin?", options=["Vitamin A", "Vitamin C"], answer_letter="B",
                answer_text="Vitamin C", probabilities={"A": 0.2, "B": 0.8}, confidence=0.8, confidence_label="high",
                abstained=False, plausible=["B"], temperature=1.0, calibrated=False, model="tiny", abstain_below=0.5)
    base.update(kw)
    return AnswerResult(**base)


def test_format_answer_bars_and_evidence():
    res = _result(explanation="Vitamin C is needed for collagen [kb#1].", citations=["kb#1"],
                  evidence=[Passage(id="kb#1", text="Scurvy <b>is</b> vitamin C deficiency.", score=0.9, source="kb.md")])
    answer, probs, conf, expl, ev = _format(res)
    assert answer == "### Answer: B) Vitamin C"
    assert probs == {"A) Vitamin A": 0.2, "B) Vitamin C": 0.8}  # one bar per option
    assert "Answered" in conf and "high" in conf and "Not medical advice" in conf
    assert "collagen" in expl and "[kb#1]" in expl
    assert "kb#1" in ev and "&lt;b&gt;" in ev  # passage text is escaped, not rendered as HTML


def test_abstention_is_not_presented_as_the_answer():
    res = _result(probabilities={"A": 0.45, "B": 0.55}, confidence=0.55, confidence_label="medium", abstained=True,
                  abstain_reason="low_confidence", abstain_below=0.6, plausible=["B", "A"], explanation="Because.")
    answer, _, conf, expl, _ = _format(res)
    assert answer.startswith("### No confident answer") and "Answer: B)" not in answer and "0.6" in answer
    assert "Plausible options" in answer and "Abstained" in conf
    assert expl.startswith("_Tentative")


def test_ui_mounted_at_ui_answers_through_the_engine(tiny_engine):
    from gradio_client import Client

    with running(tiny_engine, ui=True) as url:
        assert httpx.get(url + "/ui/", follow_redirects=True).status_code == 200
        client = Client(url + "/ui/", verbose=False)
        row = SAMPLES[2]
        answer, label, conf, expl, ev = client.predict(*row, True, False, api_name="/answer")
        assert "Answer:" in answer or "No confident answer" in answer
        assert {c["label"] for c in label["confidences"]} == {f"{L}) {o}" for L, o in zip("ABCDE", row[1:])}
        assert expl and "No retrieved evidence" in ev
        with pytest.raises(Exception, match="options in order"):
            client.predict("q?", "a", "", "c", "", "", False, False, api_name="/answer")


def test_ui_requires_login_when_keys_are_configured(tiny_engine):
    with running(tiny_engine, ui=True, api_keys=["ui-key-12345678"]) as url:
        cfg = httpx.get(url + "/ui/config")
        assert cfg.status_code in (401, 403) or '"auth_required":true' in cfg.text.replace(" ", "")
        bad = httpx.post(url + "/ui/login", data={"username": "x", "password": "wrong-key"})
        assert bad.status_code in (400, 401)
        ok = httpx.post(url + "/ui/login", data={"username": "x", "password": "ui-key-12345678"})
        assert ok.status_code == 200
