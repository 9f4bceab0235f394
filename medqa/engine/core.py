"""The one engine object behind ``medqa ask``, ``medqa predict``, the HTTP API and the UI.

It owns the model, tokenizer, option scorer, calibration and (optionally) a retriever, and it
serialises every use of the model with one re-entrant lock, so the server can share a single
instance across request threads.

How an answer is made — the order matters:

1. retrieve evidence (optional) and put it in the prompt's context block;
2. score the options in **one forward pass** (:class:`medqa.scoring.hf.HFScorer`) — the answer is the
   arg-max of these probabilities, never parsed from generated text, so "THE ANSWER IS B" style
   parsing bugs cannot happen;
3. calibrate (divide the option logits by the saved temperature) and decide: answer or abstain;
4. generate the explanation **conditioned on the chosen answer** (greedy, repetition penalty,
   stop at EOS or the next ``###`` section, token limit) and keep only citations of retrieved ids.
"""
from __future__ import annotations

import logging
import math
import threading
from typing import Any, Iterator, Mapping, Sequence

from ..prompts import SECTION_MARKER, explanation_prefix, format_evidence
from ..records import LETTERS, MCQItem, MedQAError
from ..scoring.base import softmax_rows
from .generation import (Completion, eos_ids, finish, generate_kwargs, hold_back_stops, make_stopping_criteria,
                         normalize_stops, thread_count, torch_threads, trim_to_sentence)
from .calibration import saved_calibration, saved_qhat
from .options import make_item
from .result import AnswerResult, Passage, confidence_label, decide, extract_citations

log = logging.getLogger(__name__)

DEFAULT_MAX_NEW_TOKENS = 96
EXPLANATION_REPETITION_PENALTY = 1.2  # small models loop without it; >1.3 starts to garble medical terms
DEFAULT_RAG_K = 3


class Engine:
    """Answers MCQs with calibrated probabilities and explanations; generates text for completions.

    ``bundle`` (a :class:`medqa.modeling.ModelBundle`) is needed for explanations and generation;
    ``scorer`` defaults to an ``HFScorer`` over the bundle (tests pass a ``DummyScorer``).
    ``temperature`` divides option logits (None = 1.0, uncalibrated).  ``abstain_below``: abstain when
    the top probability is below it.  ``conformal_qhat``: abstain when the conformal set
    ``{k : p_k >= 1 - qhat}`` has more than one option.  ``retriever``: anything with
    ``search(query, k) -> list[passage]`` where passages have ``id, text, score, source``.
    """

    def __init__(
        self,
        bundle: Any = None,
        scorer: Any = None,
        *,
        temperature: float | None = None,
        retriever: Any = None,
        abstain_below: float = 0.5,
        conformal_qhat: float | None = None,
        calibrated: bool | None = None,
        rag_k: int = DEFAULT_RAG_K,
        style: str = "medqa",
        batch_size: int = 8,
        threads: int | str = "auto",
    ):
        if bundle is None and scorer is None:
            raise MedQAError("Engine needs a model bundle (medqa.modeling.load_model) or a scorer")
        _check_settings(temperature, abstain_below, conformal_qhat, rag_k)
        thread_count(threads, on_cpu=False)  # validate now, not at the first question
        if retriever is not None and not callable(getattr(retriever, "search", None)):
            raise MedQAError(f"retriever {type(retriever).__name__} has no search(query, k) method")
        if scorer is None:
            from ..scoring.hf import scorer_from_bundle

            scorer = scorer_from_bundle(bundle, style=style, batch_size=batch_size)
        self.bundle, self.scorer, self.retriever = bundle, scorer, retriever
        self.temperature = float(temperature) if temperature is not None else 1.0
        self.calibrated = (temperature is not None) if calibrated is None else calibrated
        self.abstain_below, self.conformal_qhat, self.rag_k = abstain_below, conformal_qhat, rag_k
        self.threads = threads
        # Re-entrant: answer() takes it and then calls explain() -> complete(), which take it again.
        self.lock = threading.RLock()

    # ------------------------------------------------------------------ construction

    @classmethod
    def load(
        cls,
        model: str = "embedded",
        adapter: str | None = None,
        device: str = "auto",
        dtype: str = "auto",
        temperature: float | str | None = "auto",
        retriever: Any = None,
        abstain_below: float = 0.5,
        conformal_qhat: float | str | None = "auto",
        *,
        style: str = "medqa",
        batch_size: int = 8,
        rag_k: int = DEFAULT_RAG_K,
        threads: int | str = "auto",
    ) -> "Engine":
        """Load a model (embedded default, Hub id, local/merged folder, .gguf; + optional LoRA adapter).

        ``temperature``/``conformal_qhat`` = ``"auto"`` read ``calibration.json`` from the adapter folder
        (or, for a merged model, the model folder) when present; None disables; a number overrides.
        ``threads``: torch CPU threads during model calls; "auto" uses 1 on an oversubscribed CPU.
        """
        from ..modeling import load_model

        saved = saved_calibration(model, adapter)
        temp = saved.get("temperature") if temperature == "auto" else temperature
        qhat = saved_qhat(saved) if conformal_qhat == "auto" else conformal_qhat
        if saved.get("style") and saved["style"] != style:
            log.warning("calibration.json was fitted with prompt style %r but the engine uses %r", saved["style"], style)
        bundle = load_model(model, adapter=adapter, device=device, dtype=dtype)
        return cls(bundle, temperature=temp, retriever=retriever, abstain_below=abstain_below,
                   conformal_qhat=qhat, rag_k=rag_k, style=style, batch_size=batch_size, threads=threads)

    @property
    def model_name(self) -> str:
        if self.bundle is None:
            return getattr(self.scorer, "name", "scorer")
        return self.bundle.model_id + (f"+{self.bundle.adapter}" if self.bundle.adapter else "")

    def info(self) -> dict:
        """What is loaded and how answers are decided (for ``/health``-style endpoints and logs)."""
        b = self.bundle
        return {
            "model": self.model_name,
            "model_path": getattr(b, "model_path", None),
            "adapter": getattr(b, "adapter", None),
            "device": getattr(getattr(b, "device", None), "device", None),
            "dtype": str(getattr(b, "dtype", "")).replace("torch.", "") or None,
            "temperature": self.temperature,
            "calibrated": self.calibrated,
            "abstain_below": self.abstain_below,
            "conformal_qhat": self.conformal_qhat,
            "retriever": type(self.retriever).__name__ if self.retriever is not None else None,
            "rag_k": self.rag_k,
            "threads": self.threads,
            "can_generate": b is not None,
        }

    # ------------------------------------------------------------------ answering

    def answer(
        self,
        question: str,
        options: Sequence[str] | None = None,
        *,
        id: str | None = None,
        context: str = "",
        explain: bool = True,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        rag_k: int | None = None,
    ) -> AnswerResult:
        """Answer one question.  ``options`` may be omitted when the question ends with ``A) .. B) ..``."""
        item = make_item(question, options, id=id, context=context)
        return self.answer_batch([item], explain=explain, max_new_tokens=max_new_tokens, rag_k=rag_k)[0]

    def answer_batch(
        self,
        items: Sequence[MCQItem | Mapping[str, Any]],
        *,
        explain: bool = False,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        rag_k: int | None = None,
    ) -> list[AnswerResult]:
        """Answer many items with batched scoring (one forward pass per batch); explanations one by one.

        Items are :class:`MCQItem` s or mappings with ``question``, ``options`` and optional ``id``/``context``.
        """
        items = [_as_item(x) for x in items]
        if not items:
            return []
        passages = self.retrieve(items, self.rag_k if rag_k is None else rag_k)
        evidence = [format_evidence([(p.id, p.text) for p in ps]) or None for ps in passages]
        with self.lock:
            probs = self.probabilities(items, evidence)
            results = [self._result(it, pr, ps) for it, pr, ps in zip(items, probs, passages)]
            if explain:
                for res, item, ev in zip(results, items, evidence):
                    res.explanation = self.explain(item, LETTERS.index(res.answer_letter), evidence=ev,
                                                   max_new_tokens=max_new_tokens)
                    res.citations = extract_citations(res.explanation, [p.id for p in res.evidence])
        return results

    def probabilities(self, items: Sequence[MCQItem], evidence: Sequence[str | None] | None = None) -> list[list[float]]:
        """Calibrated option probabilities per item (each row sums to 1 over that item's options)."""
        with self.lock, self.cpu_threads():
            rows = self.scorer.score(items, evidence if evidence and any(evidence) else None)
        if len(rows) != len(items):
            raise MedQAError(f"scorer {self.scorer.name} returned {len(rows)} rows for {len(items)} items")
        out = []
        for item, row in zip(items, rows):
            if len(row) != len(item.options) or not all(math.isfinite(x) for x in row):
                raise MedQAError(f"scorer {self.scorer.name} returned an invalid row for item {item.id}: {row!r}")
            p = [math.exp(x) for x in softmax_rows(list(row), self.temperature)]
            total = sum(p)
            out.append([x / total for x in p])
        return out

    def _result(self, item: MCQItem, probs: list[float], passages: list[Passage]) -> AnswerResult:
        best, plausible, reason = decide(probs, self.abstain_below, self.conformal_qhat)
        gold = item.answer_letter
        return AnswerResult(
            id=item.id, question=item.question, options=list(item.options),
            answer_letter=LETTERS[best], answer_text=item.options[best],
            probabilities={L: p for L, p in zip(LETTERS, probs)},
            confidence=probs[best], confidence_label=confidence_label(probs[best]),
            abstained=reason is not None, abstain_reason=reason, abstain_below=self.abstain_below,
            conformal_qhat=self.conformal_qhat, plausible=plausible,
            evidence=passages, temperature=self.temperature, calibrated=self.calibrated, model=self.model_name,
            gold_letter=gold, correct=None if gold is None else gold == LETTERS[best],
        )

    def retrieve(self, items: Sequence[MCQItem], k: int) -> list[list[Passage]]:
        """Top-``k`` passages per item from the retriever (empty lists without one or with k=0)."""
        if self.retriever is None or k <= 0:
            return [[] for _ in items]
        out = []
        for item in items:
            try:
                hits = self.retriever.search(_query(item), k)
            except MedQAError:
                raise
            except Exception as e:  # a broken index must not look like "no evidence found"
                raise MedQAError(f"retrieval failed for item {item.id}: {type(e).__name__}: {e}") from e
            out.append([Passage(id=str(h.id), text=str(h.text), score=_float_or_none(getattr(h, "score", None)),
                                source=str(getattr(h, "source", "") or "")) for h in list(hits)[:k]])
        return out

    # ------------------------------------------------------------------ explanations and generation

    def explain(
        self,
        item: MCQItem,
        answer: int,
        *,
        evidence: str | None = None,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        logits_processor: Any = None,
    ) -> str:
        """Explanation of why option ``answer`` (0-based) is right, generated after the answer in the prompt.

        Greedy with a repetition penalty; ends at EOS, at the next ``###`` section, or after
        ``max_new_tokens`` (then trimmed to the last full sentence when that keeps most of it).
        """
        prefix = explanation_prefix(item, answer, evidence=evidence)
        done = self.complete(prefix, max_new_tokens, stop=[SECTION_MARKER],
                             repetition_penalty=EXPLANATION_REPETITION_PENALTY, logits_processor=logits_processor)
        text = done.text.strip()
        return trim_to_sentence(text) if done.finish_reason == "length" else text

    def complete(
        self,
        prompt: str,
        max_tokens: int = 128,
        temperature: float = 0.0,
        stop: str | Sequence[str] | None = None,
        *,
        top_p: float = 1.0,
        repetition_penalty: float = 1.0,
        seed: int | None = None,
        logits_processor: Any = None,
    ) -> Completion:
        """Continue ``prompt`` (raw text; one BOS is added) and report why generation ended."""
        import torch

        model, tok = self._need_model()
        stops = normalize_stops(stop)
        kw = generate_kwargs(tok, max_tokens, temperature, top_p, repetition_penalty, logits_processor)
        with self.lock:
            ids = self._encode(prompt, max_tokens)
            crit = make_stopping_criteria(tok, ids.shape[1], stops) if stops else None
            if seed is not None:
                torch.manual_seed(seed)
            with torch.inference_mode(), self.cpu_threads():
                out = model.generate(ids, attention_mask=torch.ones_like(ids), stopping_criteria=crit, **kw)
        new = out[0, ids.shape[1]:].tolist()
        return finish(tok, new, stops, eos_ids(model, tok), max_tokens, ids.shape[1])

    def generate(self, prompt: str, max_tokens: int = 128, temperature: float = 0.0,
                 stop: str | Sequence[str] | None = None, **kw: Any) -> str:
        """The completion text only (see :meth:`complete` for keyword options)."""
        return self.complete(prompt, max_tokens, temperature, stop, **kw).text

    def stream(self, prompt: str, max_tokens: int = 128, temperature: float = 0.0,
               stop: str | Sequence[str] | None = None, **kw: Any) -> Iterator[str]:
        """Yield the completion text piece by piece as it is generated (``TextIteratorStreamer``).

        The model lock is held by the generation thread for the whole generation; closing the
        iterator early (client disconnect) cancels generation at the next token.
        """
        from .streaming import stream_completion

        model, tok = self._need_model()
        stops = normalize_stops(stop)
        gen_kw = generate_kwargs(tok, max_tokens, temperature, kw.pop("top_p", 1.0),
                                 kw.pop("repetition_penalty", 1.0), kw.pop("logits_processor", None))
        seed = kw.pop("seed", None)
        if kw:
            raise MedQAError(f"unknown stream option(s): {', '.join(sorted(kw))}; see Engine.complete")
        with self.lock:  # validate now, so a bad prompt fails before a streaming response starts
            ids = self._encode(prompt, max_tokens)
        return hold_back_stops(stream_completion(self, ids, stops, gen_kw, seed), stops)

    def cpu_threads(self) -> torch_threads:
        """Context for one model call with the configured torch thread count (see ``thread_count``)."""
        kind = getattr(getattr(self.bundle, "device", None), "kind", None)
        return torch_threads(thread_count(self.threads, on_cpu=kind == "cpu"))

    def _need_model(self) -> tuple[Any, Any]:
        if self.bundle is None:
            raise MedQAError("this engine has a scorer but no generative model; build it with Engine.load(...)")
        return self.bundle.model, self.bundle.tokenizer

    def _encode(self, prompt: str, max_tokens: int):
        """Prompt ids ``(1, T)`` on the model's device; refuses prompts that do not fit the context."""
        import torch

        from ..prompts import encode

        model, tok = self._need_model()
        if not isinstance(prompt, str) or not prompt:
            raise MedQAError("prompt is empty; give some text to continue")
        ids = encode(tok, prompt)
        limit = getattr(model.config, "max_position_embeddings", None)
        if limit and len(ids) + max_tokens > limit:
            raise MedQAError(
                f"prompt has {len(ids)} tokens; with max_tokens={max_tokens} that exceeds the model's context of "
                f"{limit} tokens: shorten the prompt or lower max_tokens"
            )
        return torch.tensor([ids], dtype=torch.long, device=next(model.parameters()).device)


# ---------------------------------------------------------------------- helpers


def _as_item(x: MCQItem | Mapping[str, Any]) -> MCQItem:
    if isinstance(x, MCQItem):
        return x
    if isinstance(x, Mapping):
        return make_item(x.get("question", ""), x.get("options") or None, id=x.get("id"), context=x.get("context") or "")
    raise MedQAError(f"expected an MCQItem or a mapping with question/options, got {type(x).__name__}")


def _query(item: MCQItem) -> str:
    try:
        from ..rag.base import query_for_item
    except ImportError:  # retrieval package absent: same query shape, question then options
        return item.question.strip() + "\n" + "\n".join(o.strip() for o in item.options)
    return query_for_item(item)


def _float_or_none(x: Any) -> float | None:
    try:
        return None if x is None else float(x)
    except (TypeError, ValueError):
        return None


def _check_settings(temperature, abstain_below, conformal_qhat, rag_k) -> None:
    if temperature is not None and not (isinstance(temperature, (int, float)) and temperature > 0):
        raise MedQAError(f"temperature must be a positive number (got {temperature!r})")
    if not 0.0 <= abstain_below <= 1.0:
        raise MedQAError(f"--abstain-below must be between 0 and 1 (got {abstain_below}); 0 never abstains")
    if conformal_qhat is not None and not 0.0 <= conformal_qhat <= 1.0:
        raise MedQAError(f"conformal threshold must be between 0 and 1 (got {conformal_qhat})")
    if rag_k < 0:
        raise MedQAError(f"--rag-k must be >= 0 (got {rag_k})")
