"""The embedded Gemma 3 270M behind the real server: /v1/mcq with an explanation, and chat via the openai client."""
from __future__ import annotations

import httpx
import pytest
from serve_helpers import API_KEY, no_traceback, running

SCURVY = {"question": "Deficiency of which vitamin causes scurvy, with bleeding gums and poor wound healing?",
          "options": ["Vitamin A", "Vitamin B1", "Vitamin C", "Vitamin D"]}


@pytest.mark.real_model
def test_embedded_model_mcq_and_chat(embedded_engine):
    from openai import OpenAI

    with running(embedded_engine, api_keys=[API_KEY], rate_limit_per_min=0) as url:
        auth = {"Authorization": f"Bearer {API_KEY}"}
        r = httpx.post(url + "/v1/mcq", json={**SCURVY, "explain": True, "max_explanation_tokens": 24},
                       headers=auth, timeout=600)
        assert r.status_code == 200, r.text
        body = r.json()
        probs = body["probabilities"]
        assert set(probs) == set("ABCD") and abs(sum(probs.values()) - 1) < 1e-6
        assert body["answer_letter"] == max(probs, key=probs.get)
        assert body["confidence_label"] in ("high", "medium", "low") and isinstance(body["abstained"], bool)
        assert body["explanation"].strip() and body["model"] == "embedded"

        client = OpenAI(base_url=url + "/v1", api_key=API_KEY, max_retries=0, timeout=600)
        chat = client.chat.completions.create(
            model="medqa", max_tokens=24, messages=[{"role": "user", "content": "What causes scurvy?"}])
        text = chat.choices[0].message.content
        assert text.strip() and "### Question" not in text  # the chat stop strings end the reply
        assert "vitamin c" in text.lower()
        pieces = list(client.chat.completions.create(
            model="medqa", max_tokens=24, stream=True, messages=[{"role": "user", "content": "What causes scurvy?"}]))
        assert "".join(p.choices[0].delta.content or "" for p in pieces if p.choices) == text
        # an over-long prompt is refused with a 422 that says how to fix it
        r = httpx.post(url + "/v1/completions", json={"model": "medqa", "prompt": "word " * 4000, "max_tokens": 8},
                       headers=auth)
        assert r.status_code == 422 and "shorten" in r.json()["error"]["message"]
        no_traceback(r.text)
