"""Security and limits: API keys, body size, malformed JSON, token limits, rate limit, no tracebacks, no bodies in logs."""
from __future__ import annotations

import json
import logging
import time

import httpx
import openai
import pytest
from serve_helpers import API_KEY, no_traceback, running

from medqa.records import MedQAError
from medqa.serve.auth import check_key
from medqa.serve.settings import ServeSettings, is_loopback

AUTH = {"Authorization": f"Bearer {API_KEY}"}
CHAT = {"model": "medqa", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _error(r: httpx.Response, status: int, code: str | None = None) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    no_traceback(r.text)
    err = r.json()["error"]
    assert set(err) >= {"message", "type", "code"} and err["message"]
    if code:
        assert err["code"] == code, err
    return err


@pytest.mark.parametrize("path,method,body", [
    ("/v1/models", "GET", None), ("/v1/chat/completions", "POST", CHAT), ("/v1/mcq", "POST", {"question": "q"}),
    ("/v1/completions", "POST", {"model": "medqa", "prompt": "x"}),
])
def test_401_without_and_with_wrong_key(server, path, method, body):
    r = httpx.request(method, server + path, json=body)
    err = _error(r, 401, "missing_api_key")
    assert err["type"] == "authentication_error" and "Authorization: Bearer" in err["message"]
    assert r.headers["www-authenticate"] == "Bearer"
    r = httpx.request(method, server + path, json=body, headers={"Authorization": "Bearer not-the-key-123"})
    _error(r, 401, "invalid_api_key")
    r = httpx.request(method, server + path, json=body, headers={"Authorization": f"Basic {API_KEY}"})
    _error(r, 401)


def test_openai_client_with_wrong_key_raises_authentication_error(server):
    c = openai.OpenAI(base_url=server + "/v1", api_key="wrong-key-xyz", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        c.models.list()


def test_413_on_oversized_body(server):
    big = {"question": "x" * 20_000, "options": ["a", "b"]}  # server limit is 16 KiB
    err = _error(httpx.post(server + "/v1/mcq", json=big, headers=AUTH), 413, "request_too_large")
    assert "limit is 16384 bytes" in err["message"]

    def chunked():  # no Content-Length: counted while streaming in
        for _ in range(40):
            yield b"x" * 1024

    _error(httpx.post(server + "/v1/mcq", content=chunked(), headers={**AUTH, "Content-Type": "application/json"}), 413)


def test_422_on_malformed_json(server):
    for raw in (b'{"question": "q", "options": [', b"not json", b'{"question": }'):
        r = httpx.post(server + "/v1/mcq", content=raw, headers={**AUTH, "Content-Type": "application/json"})
        err = _error(r, 422)
        assert "not valid JSON" in err["message"]
    r = httpx.post(server + "/v1/chat/completions", json={"model": "medqa", "messages": "hi"}, headers=AUTH)
    err = _error(r, 422)
    assert err["param"] == "messages"


def test_422_on_token_limits_and_validation_does_not_echo_input(server):
    r = httpx.post(server + "/v1/chat/completions", json={**CHAT, "max_tokens": 100_000}, headers=AUTH)
    err = _error(r, 422, "max_tokens_exceeded")
    assert "limit of 64" in err["message"]
    secret = "PATIENT-John-Doe-1970"
    r = httpx.post(server + "/v1/chat/completions", json={**CHAT, "temperature": secret}, headers=AUTH)
    assert secret not in _error(r, 422)["message"]
    r = httpx.post(server + "/v1/chat/completions", json={**CHAT, "n": 3}, headers=AUTH)
    _error(r, 422)


def test_404_and_405_are_openai_style(server):
    _error(httpx.get(server + "/v1/nope", headers=AUTH), 404)
    _error(httpx.get(server + "/v1/mcq", headers=AUTH), 405)


def test_429_per_key_rate_limit(tiny_engine):
    keys = ["first-key-aaaaaaaa", "second-key-bbbbbbb"]
    with running(tiny_engine, api_keys=keys, rate_limit_per_min=3, rate_limit_burst=3) as url:
        statuses = [httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {keys[0]}"}).status_code
                    for _ in range(5)]
        assert statuses[:3] == [200] * 3 and statuses[3:] == [429, 429]
        r = httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {keys[0]}"})
        _error(r, 429, "rate_limit_exceeded")
        assert int(r.headers["retry-after"]) >= 1
        # another key has its own bucket; /healthz is never limited
        assert httpx.get(url + "/v1/models", headers={"Authorization": f"Bearer {keys[1]}"}).status_code == 200
        assert httpx.get(url + "/healthz").status_code == 200


class _Exploding:
    """An engine whose every call fails with an internal error quoting the input."""

    model_name = "boom"
    bundle = None
    retriever = None

    def answer_batch(self, items, **kw):
        raise RuntimeError(f"internal failure while handling {items[0].question}")

    def complete(self, prompt, **kw):
        raise KeyError(prompt)

    def stream(self, prompt, **kw):
        def gen():
            yield "partial "
            raise ValueError(f"exploded on {prompt}")
        return gen()


def test_500_has_no_traceback_and_logs_no_patient_text(caplog):
    secret = "Jane Roe, MRN 99812, HIV positive"
    caplog.set_level(logging.INFO)
    with running(_Exploding(), model_name="boom") as url:
        r = httpx.post(url + "/v1/mcq", json={"question": f"{secret}: which drug?", "options": ["a", "b"],
                                             "explain": False})
        err = _error(r, 500, "internal_error")
        assert r.headers["x-request-id"] in err["message"] and secret not in r.text
        r = httpx.post(url + "/v1/completions", json={"model": "boom", "prompt": secret})
        _error(r, 500)
        r = httpx.post(url + "/v1/chat/completions", json={"model": "boom", "stream": True,
                                                          "messages": [{"role": "user", "content": secret}]})
        assert r.status_code == 200  # the stream had started: the failure arrives in-band
        events = [line[6:] for line in r.text.splitlines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and "error" in json.loads(events[-2])
        no_traceback(r.text)
        assert secret not in r.text
    logs = "\n".join(rec.getMessage() for rec in caplog.records)
    assert "unhandled error" in logs and '"event":"access"' in logs
    assert secret not in logs and "MRN" not in logs  # neither bodies nor exception messages are logged


def test_access_log_has_no_bodies_by_default(server, caplog):
    caplog.set_level(logging.INFO, logger="medqa.access")
    marker = "PATIENT-MARKER-4471"
    httpx.post(server + "/v1/mcq", json={"question": f"{marker} heart?", "options": ["a", "b"], "explain": False},
               headers=AUTH)
    # The access line is written after the last body chunk is sent, so the client can return first: wait for it.
    deadline, mine = time.monotonic() + 10, []
    while not mine and time.monotonic() < deadline:
        lines = [json.loads(r.getMessage()) for r in list(caplog.records) if r.name == "medqa.access"]
        mine = [x for x in lines if x["path"] == "/v1/mcq"]
        time.sleep(0.02)
    assert mine and mine[-1]["status"] == 200 and mine[-1]["caller"].startswith("key-")
    assert set(mine[-1]) >= {"request_id", "method", "path", "status", "ms", "client", "bytes_in", "bytes_out"}
    assert marker not in caplog.text and API_KEY not in caplog.text


def test_refuses_public_bind_without_keys():
    with pytest.raises(MedQAError, match="--insecure"):
        ServeSettings(host="0.0.0.0").check_bind()
    ServeSettings(host="0.0.0.0", insecure=True).check_bind()
    ServeSettings(host="0.0.0.0", api_keys=["long-enough-key"]).check_bind()
    ServeSettings(host="127.0.0.1").check_bind()
    ServeSettings(host="::1").check_bind()
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and not is_loopback("192.168.1.4")
    assert not is_loopback("::")


def test_cli_refuses_public_bind_before_loading_a_model(capsys):
    from medqa.cli import main

    assert main(["serve", "--host", "0.0.0.0", "--model", "/nonexistent"]) == 2
    assert "--insecure" in capsys.readouterr().err


def test_settings_from_env(monkeypatch):
    monkeypatch.setenv("MEDQA_API_KEYS", "key-one-123456, key-two-123456")
    monkeypatch.setenv("MEDQA_PORT", "9123")
    s = ServeSettings()
    assert s.port == 9123 and [k.get_secret_value() for k in s.api_keys] == ["key-one-123456", "key-two-123456"]
    assert "key-one" not in repr(s) and "key-one" not in json.dumps(s.public_dict())
    monkeypatch.setenv("MEDQA_API_KEYS", "short")
    with pytest.raises(ValueError, match="at least 8"):
        ServeSettings()


def test_check_key_is_exact():
    keys = [b"abcdefgh12", b"zyxwvuts98"]
    assert check_key("abcdefgh12", keys) and check_key("zyxwvuts98", keys)
    assert not check_key("abcdefgh1", keys) and not check_key("abcdefgh123", keys) and not check_key("", keys)
