"""``medqa serve`` and ``medqa ui`` as real subprocesses on free loopback ports (command wiring, env settings)."""
from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from medqa.serve.server import free_socket


def _port() -> int:
    sock = free_socket()
    port = sock.getsockname()[1]
    sock.close()
    return port


def _wait(proc: subprocess.Popen, url: str, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"process exited ({proc.returncode}): {proc.stderr.read().decode()[-3000:]}")
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    pytest.fail(f"{url} did not come up within {timeout} s")


def _stop(proc: subprocess.Popen) -> str:
    proc.terminate()
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err.decode()


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    from medqa.testing import save_tiny

    return save_tiny(tmp_path_factory.mktemp("tiny") / "model")


def test_medqa_serve_command(tiny_model_dir):
    port = _port()
    env = {**os.environ, "MEDQA_API_KEYS": "cli-key-123456789", "MEDQA_RATE_LIMIT_PER_MIN": "0",
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    proc = subprocess.Popen([sys.executable, "-m", "medqa", "serve", "--model", tiny_model_dir, "--port", str(port),
                             "--model-name", "tiny-medqa", "--max-tokens", "32"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(proc, url + "/healthz")
        auth = {"Authorization": "Bearer cli-key-123456789"}
        assert httpx.get(url + "/v1/models").status_code == 401  # the key came from MEDQA_API_KEYS
        assert httpx.get(url + "/v1/models", headers=auth).json()["data"][0]["id"] == "tiny-medqa"
        r = httpx.post(url + "/v1/chat/completions", headers=auth,
                       json={"model": "tiny-medqa", "messages": [{"role": "user", "content": "x"}], "max_tokens": 64})
        assert r.status_code == 422 and "limit of 32" in r.json()["error"]["message"]  # --max-tokens wins
        secret = "SECRET-PATIENT-NAME"
        r = httpx.post(url + "/v1/mcq", headers=auth, json={"question": f"{secret}?", "options": ["a", "b"],
                                                             "explain": False})
        assert r.status_code == 200
    finally:
        err = _stop(proc)
    assert '"path":"/v1/mcq"' in err and '"status":200' in err  # structured access log on stderr
    assert secret not in err and "cli-key-123456789" not in err


def test_medqa_ui_command(tiny_model_dir):
    port = _port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    proc = subprocess.Popen([sys.executable, "-m", "medqa", "ui", "--model", tiny_model_dir, "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait(proc, f"http://127.0.0.1:{port}/")
        assert "medqa" in httpx.get(f"http://127.0.0.1:{port}/config").text
    finally:
        _stop(proc)
