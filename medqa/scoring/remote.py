"""EXPERIMENTAL: option scoring through an OpenAI-compatible ``/v1/completions`` server (vLLM,
llama.cpp server, ...) using the ``logprobs`` of a 1-token completion.

The server only returns the top-k alternatives at the answer position, so this is an approximation
of :class:`medqa.scoring.hf.HFScorer`: letters outside the top-k get a floor log-probability (below
the smallest returned one).  Tokens are matched by their stripped text, so ``" A"`` and ``"A"`` both
count for A (servers differ in how they spell the leading space).  Tested here with a fake transport
only; check it against HFScorer on a few items before trusting it.
"""
from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from ..prompts import render_prompt
from ..records import LETTERS, MCQItem, MedQAError
from .base import softmax_rows

Transport = Callable[[str, dict, dict], dict]


def urllib_transport(url: str, payload: dict, headers: dict, timeout: float = 120.0) -> dict:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read().decode())
    except (urllib.error.URLError, TimeoutError) as e:
        raise MedQAError(f"could not reach {url}: {e} (is the server running? check --base-url)") from e


class RemoteScorer:
    """``score(items)`` via ``POST {base_url}/completions`` with ``max_tokens=1, logprobs=top_k``."""

    name = "remote"

    def __init__(self, base_url: str, model: str, style: str = "lmeval", api_key: str | None = None,
                 top_k: int = 20, max_workers: int = 4, transport: Transport | None = None):
        self.url = base_url.rstrip("/") + "/completions"
        self.model, self.style, self.top_k, self.max_workers = model, style, top_k, max_workers
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.transport = transport or urllib_transport
        self.missing_letters = 0  # letters that were not in the returned top-k (floored)
        self.name = f"remote:{model}"

    def _one(self, item: MCQItem, evidence: str | None) -> list[float]:
        payload = {"model": self.model, "prompt": render_prompt(item, self.style, evidence), "max_tokens": 1,
                   "temperature": 0, "logprobs": self.top_k}
        resp = self.transport(self.url, payload, self.headers)
        try:
            top = resp["choices"][0]["logprobs"]["top_logprobs"][0]  # {token: logprob}
        except (KeyError, IndexError, TypeError) as e:
            raise MedQAError(f"{self.url} returned no top_logprobs; the server must support 'logprobs' on /completions") from e
        floor = min(top.values()) - 1.0 if top else -30.0
        logits = []
        for letter in LETTERS[: len(item.options)]:
            hits = [lp for tok, lp in top.items() if tok.strip() == letter]
            if not hits:
                self.missing_letters += 1
            logits.append(math.log(sum(math.exp(x) for x in hits)) if hits else floor)
        return softmax_rows(logits)

    def score(self, items: Sequence[MCQItem], evidence: Sequence[str | None] | None = None) -> list[list[float]]:
        evidence = evidence if evidence is not None else [None] * len(items)
        with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
            return list(pool.map(self._one, items, evidence))
