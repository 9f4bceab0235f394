"""The remote backend: an Engine whose scoring and generation run on another OpenAI-compatible server.

* fast: a second ``medqa serve`` (tiny model) is the remote; echo scoring must reproduce local scoring exactly;
* real: llama-cpp-python's server running the embedded Gemma GGUF is the remote (same model as the
  embedded default, q4_k_m in llama.cpp vs its fp32 dequantization in torch).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest
from serve_helpers import API_KEY, running

from medqa.records import MedQAError
from medqa.serve.errors import UpstreamError
from medqa.serve.remote import RemoteEngine
from medqa.serve.server import free_socket

ITEMS = [
    {"question": "heart drug dose?", "options": ["insulin dose", "heart drug", "fever pain"]},
    {"question": "kidney acid enzyme?", "options": ["a b", "c d", "e f", "g h", "i j"]},
]


def _probs(results):
    return [list(r.probabilities.values()) for r in results]


def test_remote_engine_reproduces_local_engine(tiny_engine):
    with running(tiny_engine, api_keys=[API_KEY], rate_limit_per_min=0) as back:
        local = _probs(tiny_engine.answer_batch(ITEMS))
        for method in ("echo", "auto"):
            remote = RemoteEngine.connect(back, "medqa", API_KEY, scoring=method)
            got = _probs(remote.answer_batch(ITEMS))
            for a, b in zip(local, got):
                assert b == pytest.approx(a, abs=1e-5), method
        top = RemoteEngine.connect(back + "/v1", "medqa", API_KEY)  # default "top"; random model: letters may miss
        assert all(abs(sum(p) - 1) < 1e-9 for p in _probs(top.answer_batch(ITEMS)))
        # generation goes through /v1/completions and matches local greedy text, streamed or not
        prompt = "### Question:\nheart"
        assert remote.complete(prompt, 8).text == tiny_engine.complete(prompt, 8).text
        assert "".join(remote.stream(prompt, 8)) == tiny_engine.complete(prompt, 8).text
        explained = remote.answer(ITEMS[0]["question"], ITEMS[0]["options"], explain=True, max_new_tokens=6)
        assert explained.explanation == tiny_engine.answer(ITEMS[0]["question"], ITEMS[0]["options"], explain=True,
                                                           max_new_tokens=6).explanation
        assert remote.info()["backend"] == "remote" and remote.model_name.startswith("medqa@127.0.0.1:")


def test_api_front_over_remote_backend(tiny_engine):
    """The same API (and so the UI) fronts a remote server: /v1/mcq and chat go through the backend."""
    from openai import OpenAI

    with running(tiny_engine, api_keys=[API_KEY], rate_limit_per_min=0) as back:
        remote = RemoteEngine.connect(back, "medqa", API_KEY, scoring="echo")
        with running(remote, rate_limit_per_min=0) as front:
            r = httpx.post(front + "/v1/mcq", json={**ITEMS[0], "explain": False}, timeout=60)
            assert r.status_code == 200, r.text
            expected = tiny_engine.answer_batch(ITEMS[:1])[0].probabilities
            assert r.json()["probabilities"] == pytest.approx(expected, abs=1e-5)
            client = OpenAI(base_url=front + "/v1", api_key="unused", max_retries=0)
            chat = client.chat.completions.create(model="medqa", messages=[{"role": "user", "content": "heart?"}],
                                                  max_tokens=5)
            assert chat.choices[0].message.content is not None
            streamed = list(client.chat.completions.create(model="medqa", stream=True, max_tokens=5,
                                                           messages=[{"role": "user", "content": "heart?"}]))
            assert "".join(c.choices[0].delta.content or "" for c in streamed) == chat.choices[0].message.content
    # backend gone: the front answers 502 with an OpenAI-style body, no traceback
    with running(remote, rate_limit_per_min=0) as front:
        r = httpx.post(front + "/v1/mcq", json={**ITEMS[0], "explain": False}, timeout=60)
        assert r.status_code == 502 and r.json()["error"]["code"] == "upstream_error"
        assert "cannot reach" in r.json()["error"]["message"] and "Traceback" not in r.text


def test_remote_connect_errors_say_how_to_fix(tiny_engine):
    sock = free_socket()
    dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
    sock.close()
    with pytest.raises(UpstreamError, match="cannot reach .* check --remote-url"):
        RemoteEngine.connect(dead, "medqa")
    with running(tiny_engine, rate_limit_per_min=0) as back:
        with pytest.raises(MedQAError, match="not served by .* it serves: medqa, tiny"):
            RemoteEngine.connect(back, "nope")
    with pytest.raises(MedQAError, match="full URL"):
        RemoteEngine.connect("gpu-box:8000", "medqa", check=False)
    with running(tiny_engine, api_keys=[API_KEY]) as back:
        with pytest.raises(UpstreamError, match="HTTP 401: missing API key"):
            RemoteEngine.connect(back, "medqa")


# ---------------------------------------------------------------------------------------------- llama.cpp
def _llama_server():
    try:
        import llama_cpp.server  # noqa: F401
    except ImportError:
        msg = "llama-cpp-python[server] is not installed (pip install 'llama-cpp-python[server]', builds from source)"
        if os.environ.get("CI"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    from medqa.embedded import gguf_path

    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path()), "--model_alias", "gemma-3-270m",
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "2",
           "--n_threads_batch", "2", "--verbose", "False"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"llama_cpp.server exited: {proc.stderr.read().decode()[-2000:]}")
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            time.sleep(0.5)
    proc.kill()
    pytest.fail("llama_cpp.server did not start within 180 s")


@pytest.fixture(scope="module")
def llama_server():
    proc, url = _llama_server()
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


SAMPLES = [
    {"question": "Deficiency of which vitamin causes scurvy, with bleeding gums and poor wound healing?",
     "options": ["Vitamin A", "Vitamin B1", "Vitamin C", "Vitamin D"]},
    {"question": "A man develops hives, wheeze and hypotension minutes after a bee sting. What is the first-line "
                 "treatment?", "options": ["Oral cetirizine", "Intravenous hydrocortisone", "Intramuscular epinephrine",
                                           "Nebulised salbutamol"]},
    {"question": "Which laboratory test best confirms iron deficiency?",
     "options": ["Serum ferritin", "Hemoglobin electrophoresis", "Serum vitamin B12", "Direct Coombs test", "Bilirubin"]},
]


@pytest.mark.real_model
@pytest.mark.slow
def test_remote_backend_on_llama_cpp_server_matches_embedded_model(llama_server, embedded_engine):
    remote = RemoteEngine.connect(llama_server, "gemma-3-270m", scoring="top")
    got = remote.answer_batch(SAMPLES)
    want = embedded_engine.answer_batch(SAMPLES)
    for g, w in zip(got, want):
        # llama.cpp runs the q4_k_m weights; torch runs their fp32 dequantization: close, not identical
        assert g.answer_letter == w.answer_letter
        assert list(g.probabilities.values()) == pytest.approx(list(w.probabilities.values()), abs=0.08)
    assert min(remote.scorer.last_letter_mass) > 0.2  # the letters really are where the mass is
    # echo scoring reads the same number as the top list (short prompt: llama-cpp-python echo is slow)
    prompt = "### Answer:\n"
    top = remote.backend.complete({"prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": 20})
    top_a = top["choices"][0]["logprobs"]["top_logprobs"][0]["A"]
    assert remote.scorer._echo_logprob(prompt, "A") == pytest.approx(top_a, abs=1e-3)
    # generation through completions, plain and streamed
    q = "### Question:\nWhat causes scurvy?\n\n### Answer:\n"
    done = remote.complete(q, 24, stop=["###"])
    assert done.text.strip() and "###" not in done.text and done.completion_tokens > 0
    assert "".join(remote.stream(q, 24, stop=["###"])) == done.text
    # the API fronting it: /v1/mcq and chat via the openai client
    from openai import OpenAI

    with running(remote, api_keys=[API_KEY], rate_limit_per_min=0) as front:
        r = httpx.post(front + "/v1/mcq", json={**SAMPLES[0], "explain": False},
                       headers={"Authorization": f"Bearer {API_KEY}"}, timeout=120)
        assert r.status_code == 200 and r.json()["answer_letter"] == got[0].answer_letter
        client = OpenAI(base_url=front + "/v1", api_key=API_KEY, max_retries=0, timeout=120)
        chat = client.chat.completions.create(model="medqa", max_tokens=16,
                                              messages=[{"role": "user", "content": "What causes scurvy?"}])
        assert chat.choices[0].message.content.strip()
