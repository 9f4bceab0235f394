"""A remote OpenAI-compatible server (vLLM, llama.cpp, another ``medqa serve``...) as the engine's model backend.

The same API and UI then front a GPU cluster: :class:`RemoteEngine` is an :class:`medqa.engine.Engine`
whose option scorer and text generation go over HTTP to ``/v1/completions``.

Option scoring (:class:`RemoteScorer`) renders the very prompt the local scorer uses
(:func:`medqa.prompts.render_prompt`) and reads log-probabilities of the option letters at the answer
position, in one of two ways:

* ``top`` (default): one request per question, ``max_tokens=1, logprobs=N`` — the next-token top-N
  list (vLLM allows up to ``--max-logprobs``, default 20).  A letter missing from the list gets the
  smallest listed log-probability (an upper bound on its own), so its probability is slightly overstated.
* ``echo``: one request per option with ``prompt + letter``, ``echo=true, logprobs=1``, reading the
  letter's *prompt* log-probability.  Exact; K requests per question.  Fast on vLLM; llama-cpp-python's
  server sorts the whole vocabulary for every prompt token in Python (minutes per request), so use
  ``top`` there.
* ``auto``: ``top``, then ``echo`` only for letters absent from the top list.

Requests for different questions of one batch run concurrently (``concurrency``), so a vLLM server
batches them.  Generation uses ``/v1/completions`` (with ``stream=true`` for streaming).
"""
from __future__ import annotations

import contextlib
import json
import logging
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator, Sequence
from urllib.parse import urlsplit

from ..engine.core import DEFAULT_RAG_K, Engine
from ..engine.generation import Completion, cut_at_stop, hold_back_stops, normalize_stops
from ..prompts import letter_continuations, render_prompt
from ..records import MCQItem, MedQAError
from ..scoring.base import softmax_rows
from .errors import UpstreamError

log = logging.getLogger(__name__)

SCORING_METHODS = ("auto", "top", "echo")


class RemoteBackend:
    """A thin client for one OpenAI-compatible server (``base_url`` ends in ``/v1``; it is added if missing)."""

    def __init__(self, base_url: str, model: str, api_key: str | None = None, timeout: float = 120.0,
                 extra_body: dict | None = None):
        import httpx

        url = base_url.rstrip("/")
        if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            raise MedQAError(f"--remote-url {base_url}: give a full URL such as http://gpu-box:8000/v1")
        if not url.endswith("/v1"):
            url += "/v1"
        self.base_url, self.model = url, model
        self.extra_body = dict(extra_body or {})
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.Client(base_url=url, headers=headers, timeout=httpx.Timeout(timeout, connect=10.0),
                                   limits=httpx.Limits(max_connections=64, max_keepalive_connections=32))

    @property
    def host(self) -> str:
        return urlsplit(self.base_url).netloc

    def _fail(self, what: str, exc: Exception | None = None, status: int | None = None, body: str = "") -> UpstreamError:
        detail = ""
        if body:
            try:
                err = json.loads(body).get("error")
                detail = err.get("message") if isinstance(err, dict) else str(err or body)
            except (ValueError, AttributeError):
                detail = body
            detail = ": " + " ".join(str(detail).split())[:300]
        if exc is not None and status is None:
            msg = (f"{what}: cannot reach {self.base_url} ({type(exc).__name__}); is the server running? "
                   "check --remote-url")
        else:
            msg = f"{what}: {self.base_url} answered HTTP {status}{detail}"
        e = UpstreamError(msg)
        e.status = status  # type: ignore[attr-defined]
        return e

    def list_models(self) -> list[str]:
        import httpx

        try:
            r = self.client.get("/models")
        except httpx.HTTPError as e:
            raise self._fail("listing models", e) from e
        if r.status_code != 200:
            raise self._fail("listing models", status=r.status_code, body=r.text)
        return [m.get("id", "") for m in r.json().get("data", [])]

    def complete(self, payload: dict) -> dict:
        import httpx

        body = {"model": self.model, **self.extra_body, **payload}
        try:
            r = self.client.post("/completions", json=body)
        except httpx.HTTPError as e:
            raise self._fail("completion", e) from e
        if r.status_code != 200:
            raise self._fail("completion", status=r.status_code, body=r.text)
        data = r.json()
        if not data.get("choices"):
            raise UpstreamError(f"completion: {self.base_url} returned no choices")
        return data

    def stream(self, payload: dict) -> Iterator[dict]:
        """Parsed SSE ``data:`` objects of a streamed completion."""
        import httpx

        body = {"model": self.model, **self.extra_body, **payload, "stream": True}
        try:
            with self.client.stream("POST", "/completions", json=body) as r:
                if r.status_code != 200:
                    raise self._fail("streamed completion", status=r.status_code, body=r.read().decode("utf-8", "replace"))
                for line in r.iter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    obj = json.loads(data)
                    if "error" in obj:
                        raise self._fail("streamed completion", status=500, body=data)
                    yield obj
        except httpx.HTTPError as e:
            raise self._fail("streamed completion", e) from e

    def close(self) -> None:
        self.client.close()


def _letter_of(token: str, wanted: dict[str, int]) -> int | None:
    """Option index for a returned token string, if it is exactly one of the letter continuations."""
    if token in wanted:
        return wanted[token]
    alt = token.replace("▁", " ").replace("Ġ", " ")  # raw SentencePiece / byte-level BPE spellings
    return wanted.get(alt)


class RemoteScorer:
    """Scorer protocol over a remote server; see the module docstring for the methods."""

    def __init__(self, backend: RemoteBackend, style: str = "medqa", method: str = "top", top_n: int = 20,
                 concurrency: int = 8):
        if method not in SCORING_METHODS:
            raise MedQAError(f"--remote-scoring {method!r}: choose one of {', '.join(SCORING_METHODS)}")
        self.backend, self.style, self.method, self.top_n = backend, style, method, top_n
        self.name = f"remote:{backend.model}@{backend.host}"
        self.pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="medqa-remote")
        self.last_letter_mass: list[float] = []
        self.echo_fills = 0  # letters that needed an echo request (auto mode)
        self._echo_ok: bool | None = None

    def score(self, items: Sequence[MCQItem], evidence: Sequence[str | None] | None = None) -> list[list[float]]:
        evidence = list(evidence) if evidence is not None else [None] * len(items)
        if len(evidence) != len(items):
            raise MedQAError(f"got {len(evidence)} evidence strings for {len(items)} items; pass one per item")
        prompts = [render_prompt(it, self.style, evidence=ev) for it, ev in zip(items, evidence)]
        raw = list(self.pool.map(lambda a: self._score_one(*a), zip(prompts, [len(it.options) for it in items])))
        self.last_letter_mass = [min(1.0, sum(math.exp(x) for x in r)) for r in raw]
        return [softmax_rows(r) for r in raw]

    def _score_one(self, prompt: str, k: int) -> list[float]:
        conts = letter_continuations(k, self.style)
        if self.method == "echo":
            return [self._echo_logprob(prompt, c) for c in conts]
        data = self.backend.complete({"prompt": prompt, "max_tokens": 1, "temperature": 0, "logprobs": self.top_n})
        lp = data["choices"][0].get("logprobs") or {}
        tops = lp.get("top_logprobs") or []
        if not tops or not isinstance(tops[0], dict) or not tops[0]:
            raise UpstreamError(f"{self.backend.base_url} returned no top_logprobs; the server must support "
                                "`logprobs` on /v1/completions (vLLM: --max-logprobs >= 20)")
        wanted = {c: i for i, c in enumerate(conts)}
        row: list[float | None] = [None] * k
        for token, value in tops[0].items():
            i = _letter_of(token, wanted)
            if i is not None and value is not None and math.isfinite(value):
                row[i] = value if row[i] is None else max(row[i], value)  # type: ignore[type-var]
        missing = [i for i, v in enumerate(row) if v is None]
        if missing:
            floor = min(v for v in tops[0].values() if v is not None and math.isfinite(v))
            for i in missing:
                row[i] = self._fill(prompt, conts[i], floor)
        return [float(v) for v in row]  # type: ignore[arg-type]

    def _fill(self, prompt: str, cont: str, floor: float) -> float:
        if self.method == "auto" and self._echo_ok is not False:
            try:
                value = self._echo_logprob(prompt, cont)
                self._echo_ok, self.echo_fills = True, self.echo_fills + 1
                return min(value, floor)  # it was not in the top list, so it cannot be above its floor
            except UpstreamError as e:
                if self._echo_ok is None:
                    log.warning("echo scoring unavailable on %s (%s); letters outside the top-%d get the "
                                "smallest listed log-probability", self.backend.base_url, e, self.top_n)
                self._echo_ok = False
        return floor

    def _echo_logprob(self, prompt: str, cont: str) -> float:
        data = self.backend.complete({"prompt": prompt + cont, "max_tokens": 1, "temperature": 0, "logprobs": 1,
                                      "echo": True})
        lp = data["choices"][0].get("logprobs") or {}
        tokens, values, offsets = lp.get("tokens") or [], lp.get("token_logprobs") or [], lp.get("text_offset") or []
        if not tokens or len(values) != len(tokens):
            raise UpstreamError(f"{self.backend.base_url} returned no prompt log-probabilities with echo=true")
        # The letter's token starts where the prompt ends; fall back to the last matching token before the
        # generated one when offsets are missing or shifted (a rendered BOS).
        idx = None
        if len(offsets) == len(tokens):
            base = offsets[0] if offsets and tokens[0] in ("<bos>", "<s>") else 0
            hits = [i for i, off in enumerate(offsets) if off - base == len(prompt)]
            idx = hits[0] if hits and tokens[hits[0]] in (cont, cont.replace(" ", "▁")) else None
        if idx is None:
            cands = [i for i in range(max(0, len(tokens) - 3), len(tokens)) if tokens[i] == cont]
            idx = cands[0] if cands else None
        if idx is None or values[idx] is None:
            raise UpstreamError(f"could not find the option letter {cont!r} as one token in the echoed prompt from "
                                f"{self.backend.base_url}; use --remote-scoring top")
        return float(values[idx])


class _NoLock(contextlib.AbstractContextManager):
    """The remote server schedules concurrent requests itself; the engine must not serialise them."""

    def __exit__(self, *exc: Any) -> None:
        return None


class RemoteEngine(Engine):
    """An :class:`Engine` whose scoring and generation run on a remote OpenAI-compatible server."""

    def __init__(self, backend: RemoteBackend, *, scoring: str = "top", top_n: int = 20, concurrency: int = 8,
                 style: str = "medqa", **engine_kw: Any):
        scorer = RemoteScorer(backend, style=style, method=scoring, top_n=top_n, concurrency=concurrency)
        super().__init__(None, scorer, style=style, **engine_kw)
        self.backend = backend
        self.lock = _NoLock()  # type: ignore[assignment]

    @classmethod
    def connect(cls, base_url: str, model: str, api_key: str | None = None, *, scoring: str = "top",
                calibration: str | None = None, temperature: float | str | None = "auto",
                conformal_qhat: float | str | None = "auto", retriever: Any = None, abstain_below: float = 0.5,
                rag_k: int = DEFAULT_RAG_K, check: bool = True, timeout: float = 120.0, **kw: Any) -> "RemoteEngine":
        """Connect to ``base_url`` serving ``model``.  ``calibration``: a folder with ``calibration.json``
        (the adapter folder you gave vLLM) — its temperature/threshold apply when the others are ``"auto"``."""
        from ..engine.calibration import saved_calibration, saved_qhat

        backend = RemoteBackend(base_url, model, api_key, timeout=timeout)
        if check:
            names = backend.list_models()
            if model not in names:
                raise MedQAError(f"--remote-model {model!r} is not served by {backend.base_url}; it serves: "
                                 f"{', '.join(names) or 'nothing'} (vLLM LoRA: the NAME of --lora-modules NAME=DIR)")
        saved = saved_calibration(calibration, None) if calibration else {}
        temp = saved.get("temperature") if temperature == "auto" else temperature
        qhat = saved_qhat(saved) if conformal_qhat == "auto" else conformal_qhat
        return cls(backend, scoring=scoring, temperature=temp, conformal_qhat=qhat, retriever=retriever,
                   abstain_below=abstain_below, rag_k=rag_k, **kw)

    @property
    def model_name(self) -> str:
        return f"{self.backend.model}@{self.backend.host}"

    def info(self) -> dict:
        d = super().info()
        d.update(backend="remote", remote_url=self.backend.base_url, remote_model=self.backend.model,
                 scoring=self.scorer.method, can_generate=True)
        return d

    def _payload(self, prompt: str, max_tokens: int, temperature: float, stops: list[str], top_p: float,
                 repetition_penalty: float, seed: int | None) -> dict:
        if not isinstance(prompt, str) or not prompt:
            raise MedQAError("prompt is empty; give some text to continue")
        if max_tokens < 1:
            raise MedQAError(f"max_tokens must be at least 1 (got {max_tokens})")
        payload: dict = {"prompt": prompt, "max_tokens": max_tokens, "temperature": temperature, "top_p": top_p}
        if stops:
            payload["stop"] = stops
        if seed is not None:
            payload["seed"] = seed
        if repetition_penalty != 1.0:  # not OpenAI; vLLM reads repetition_penalty, llama.cpp repeat_penalty
            payload["repetition_penalty"] = payload["repeat_penalty"] = repetition_penalty
        return payload

    def complete(self, prompt: str, max_tokens: int = 128, temperature: float = 0.0,
                 stop: str | Sequence[str] | None = None, *, top_p: float = 1.0, repetition_penalty: float = 1.0,
                 seed: int | None = None, logits_processor: Any = None) -> Completion:
        if logits_processor is not None:
            raise MedQAError("logits processors run locally and cannot be used with a remote model server")
        stops = normalize_stops(stop)
        data = self.backend.complete(self._payload(prompt, max_tokens, temperature, stops, top_p,
                                                   repetition_penalty, seed))
        choice = data["choices"][0]
        text, cut = cut_at_stop(choice.get("text") or "", stops)
        usage = data.get("usage") or {}
        completion_tokens = int(usage.get("completion_tokens") or 0)
        reason = "stop" if cut or choice.get("finish_reason") != "length" else "length"
        return Completion(text, reason, int(usage.get("prompt_tokens") or 0), completion_tokens)

    def stream(self, prompt: str, max_tokens: int = 128, temperature: float = 0.0,
               stop: str | Sequence[str] | None = None, **kw: Any) -> Iterator[str]:
        stops = normalize_stops(stop)
        payload = self._payload(prompt, max_tokens, temperature, stops, kw.pop("top_p", 1.0),
                                kw.pop("repetition_penalty", 1.0), kw.pop("seed", None))
        if kw:
            raise MedQAError(f"unknown stream option(s): {', '.join(sorted(kw))}")

        def pieces() -> Iterator[str]:
            for obj in self.backend.stream(payload):
                for choice in obj.get("choices") or []:
                    if choice.get("text"):
                        yield choice["text"]

        return hold_back_stops(pieces(), stops)

