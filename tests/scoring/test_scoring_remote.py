"""RemoteScorer (experimental) against a fake OpenAI-compatible transport."""
from __future__ import annotations

import math

import pytest

from medqa.records import MCQItem, MedQAError
from medqa.scoring.remote import RemoteScorer


def _fake(top):
    calls = []

    def transport(url, payload, headers):
        calls.append((url, payload, headers))
        return {"choices": [{"text": " B", "logprobs": {"top_logprobs": [top]}}]}

    return transport, calls


def test_remote_scorer_reads_letter_logprobs():
    transport, calls = _fake({" B": math.log(0.5), " A": math.log(0.2), "B": math.log(0.1), " The": math.log(0.15)})
    s = RemoteScorer("http://x/v1/", "m", api_key="k", transport=transport)
    item = MCQItem(id="1", question="q?", options=["a", "b", "c"])
    (row,) = s.score([item])
    # A .2, B .5 + .1 (both spellings), C missing -> floor below the smallest returned (.1 / e)
    p = [math.exp(x) for x in row]
    c = 0.1 / math.e
    assert p == pytest.approx([0.2 / (0.8 + c), 0.6 / (0.8 + c), c / (0.8 + c)], rel=1e-6)
    assert s.missing_letters == 1
    url, payload, headers = calls[0]
    assert url == "http://x/v1/completions" and payload["max_tokens"] == 1 and payload["prompt"].endswith("Answer:")
    assert headers == {"Authorization": "Bearer k"}


def test_remote_scorer_needs_logprobs():
    s = RemoteScorer("http://x/v1", "m", transport=lambda u, p, h: {"choices": [{"text": "B"}]})
    with pytest.raises(MedQAError, match="logprobs"):
        s.score([MCQItem(id="1", question="q?", options=["a", "b"])])
