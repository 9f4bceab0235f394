"""The OpenAI-compatible API and /v1/mcq over a real uvicorn server, driven by the official openai client."""
from __future__ import annotations

import threading
import time

import httpx
import pytest
from serve_helpers import API_KEY, running

AUTH = {"Authorization": f"Bearer {API_KEY}"}
MCQ = {"question": "Which drug dose for heart infection?", "options": ["insulin dose", "heart drug", "fever pain"]}


def test_models_list(client):
    ids = [m.id for m in client.models.list().data]
    assert ids[0] == "medqa" and "tiny" in ids


def test_chat_completion(client):
    r = client.chat.completions.create(model="medqa", messages=[{"role": "user", "content": "heart drug?"}],
                                       max_tokens=8)
    choice = r.choices[0]
    assert r.object == "chat.completion" and choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 8 and r.usage.prompt_tokens > 0
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_streaming_matches_non_streaming(client):
    kw = dict(model="medqa", messages=[{"role": "user", "content": "kidney acid enzyme?"}], max_tokens=12)
    full = client.chat.completions.create(**kw).choices[0].message.content
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full  # greedy: the stream is the same text, piece by piece
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes and finishes[-1] in ("stop", "length")
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_completions_and_stop(client):
    r = client.completions.create(model="medqa", prompt="### Question:\nheart", max_tokens=10)
    assert r.object == "text_completion" and r.usage.completion_tokens <= 10
    text = r.choices[0].text
    if len(text) > 2:  # a stop string taken from the middle of the greedy text cuts it there
        stop = text[2:4]
        cut = client.completions.create(model="medqa", prompt="### Question:\nheart", max_tokens=10, stop=[stop])
        assert cut.choices[0].text == text[: text.find(stop)] and cut.choices[0].finish_reason == "stop"
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model="medqa", prompt="### Question:\nheart", max_tokens=10, stream=True) if c.choices)
    assert streamed == text


def test_unknown_model_is_404_with_the_fix(client):
    import openai

    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert e.value.body["code"] == "model_not_found" and "GET /v1/models" in e.value.body["message"]


def test_mcq_answer_schema(server):
    r = httpx.post(server + "/v1/mcq", json={**MCQ, "explain": True, "max_explanation_tokens": 8}, headers=AUTH, timeout=60)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["schema_version"] == "medqa.answer/1"
    assert set(body["probabilities"]) == {"A", "B", "C"} and abs(sum(body["probabilities"].values()) - 1) < 1e-6
    assert body["answer_letter"] in "ABC" and body["confidence"] == max(body["probabilities"].values())
    assert isinstance(body["explanation"], str) and body["disclaimer"]
    assert r.headers["x-request-id"]


def test_mcq_through_openai_client(client):
    # the openai client's generic post() works against custom routes too (same auth, same errors)
    body = client.post("/mcq", cast_to=object, body={**MCQ, "explain": False})
    assert body["explanation"] == "" and body["answer_letter"] in "ABC"


def test_mcq_inline_options_and_validation(server):
    r = httpx.post(server + "/v1/mcq", json={"question": "Which? A) heart B) lung", "explain": False}, headers=AUTH)
    assert r.status_code == 200 and r.json()["options"] == ["heart", "lung"]
    r = httpx.post(server + "/v1/mcq", json={"question": "Which?", "options": ["only one"]}, headers=AUTH)
    assert r.status_code == 422 and "2-5" in r.json()["error"]["message"]


def test_healthz_and_openapi(server):
    h = httpx.get(server + "/healthz").json()  # no key needed
    assert h["status"] == "ok" and h["ready"]
    spec = httpx.get(server + "/openapi.json").json()
    for path in ("/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/mcq", "/healthz"):
        assert path in spec["paths"], path
    mcq_200 = spec["paths"]["/v1/mcq"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert mcq_200["$ref"].endswith("/AnswerResult")
    assert "HTTPBearer" in spec["components"]["securitySchemes"]


def test_concurrent_mcq_are_batched(tiny_engine):
    """Requests arriving together share scoring calls: fewer batches than requests, all answered."""
    with running(tiny_engine, rate_limit_per_min=0, batch_window_ms=20, max_batch=8) as url:
        results, errors = [], []

        def ask(i: int) -> None:
            try:
                r = httpx.post(url + "/v1/mcq", json={**MCQ, "id": f"q{i}", "explain": False}, timeout=60)
                results.append((i, r.status_code, r.json()["id"]))
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=ask, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors and sorted(r[0] for r in results) == list(range(12))
        assert all(code == 200 and rid == f"q{i}" for i, code, rid in results)  # each gets its own answer
        health = httpx.get(url + "/healthz").json()
        assert health["queue"] == 0 and health["batching"]["items"] == 12
        assert health["batching"]["batches"] < 12 and health["batching"]["largest"] > 1


def test_healthz_stays_responsive_during_generation(tiny_engine):
    """While the model is busy (its lock held, as during a long generation), /healthz still answers
    and a model request waits instead of failing."""
    with running(tiny_engine, rate_limit_per_min=0, max_tokens=400) as url:
        result = {}

        def generation() -> None:
            r = httpx.post(url + "/v1/completions", json={"model": "medqa", "prompt": "heart", "max_tokens": 8},
                           timeout=120)
            result["status"] = r.status_code

        with tiny_engine.lock:  # the model is "generating"
            t = threading.Thread(target=generation)
            t.start()
            for _ in range(3):
                assert httpx.get(url + "/healthz", timeout=5).status_code == 200
                time.sleep(0.05)
            assert "status" not in result, "the completion should be waiting for the model"
        t.join(60)
        assert result.get("status") == 200


class _KB:
    """A retriever over two fixed passages (the engine only needs search(query, k))."""

    def __init__(self):
        from medqa.rag import Passage

        self.passages = [Passage("kb-1#0", "Scurvy is caused by vitamin C deficiency.", 0.9, "kb.md"),
                         Passage("kb-2#0", "Insulin lowers blood glucose.", 0.4, "kb.md")]
        self.queries = []

    def search(self, query, k=5):
        self.queries.append(query)
        return self.passages[:k]


def test_mcq_returns_retrieved_evidence_and_rag_false_skips_it():
    from serve_helpers import tiny_bundle

    from medqa.engine import Engine

    kb = _KB()
    engine = Engine(tiny_bundle(), retriever=kb, rag_k=2)
    with running(engine, rate_limit_per_min=0) as url:
        body = httpx.post(url + "/v1/mcq", json={**MCQ, "explain": False}, timeout=60).json()
        assert [p["id"] for p in body["evidence"]] == ["kb-1#0", "kb-2#0"]
        assert body["evidence"][0]["source"] == "kb.md" and kb.queries[-1].startswith(MCQ["question"])
        n = len(kb.queries)
        body = httpx.post(url + "/v1/mcq", json={**MCQ, "explain": False, "rag": False}, timeout=60).json()
        assert body["evidence"] == [] and len(kb.queries) == n
