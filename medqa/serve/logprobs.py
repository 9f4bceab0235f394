"""``logprobs`` / ``echo`` for ``/v1/completions`` with a local model (OpenAI legacy completions format).

This is what makes ``medqa serve`` itself usable as the *remote* backend of another medqa front
(:mod:`medqa.serve.remote`): ``max_tokens=1, logprobs=20`` returns the next-token top-20 at the answer
position, and ``echo=true`` returns the log-probability of every prompt token.

Token strings are decoded *in context* (``decode(prev + tok)`` minus ``decode(prev)``), so a
SentencePiece word-initial piece keeps its leading space; ``text_offset`` indexes into the returned
text (prompt + completion with ``echo``, the completion alone otherwise).  The prompt's BOS is not
listed, and, as in OpenAI's API, the first echoed token has no log-probability.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..engine.generation import Completion, eos_ids, finish, generate_kwargs, make_stopping_criteria, normalize_stops
from ..prompts import encode
from ..records import MedQAError

HEAD_CHUNK = 64  # positions per LM-head call for echo (the head is V=262k wide for Gemma)


def _piece(tok: Any, prev: int | None, tid: int) -> str:
    if prev is None:
        return tok.decode([tid], skip_special_tokens=True)
    both = tok.decode([prev, tid], skip_special_tokens=True)
    return both[len(tok.decode([prev], skip_special_tokens=True)):]


def _rows(tok: Any, logprobs: Any, chosen: Sequence[int], prevs: Sequence[int | None], top_n: int):
    """Per position: (token string, its logprob, {top string: logprob}) from a (N, V) log-prob tensor."""
    import torch

    out = []
    k = max(1, top_n)
    vals, idx = torch.topk(logprobs, k, dim=-1)
    for j, tid in enumerate(chosen):
        top: dict[str, float] = {}
        if top_n > 0:
            for v, i in zip(vals[j].tolist(), idx[j].tolist()):
                s = _piece(tok, prevs[j], int(i))
                if s not in top or v > top[s]:
                    top[s] = float(v)
        lp = float(logprobs[j, tid])
        s = _piece(tok, prevs[j], int(tid))
        top.setdefault(s, lp)
        out.append((s, lp, top))
    return out


def _prompt_logprobs(engine: Any, ids: Any) -> Any:
    """(T-1, V) log-probs of tokens 1..T-1 given their prefix, with the LM head applied in chunks."""
    import torch

    from ..modeling import decoder_and_head

    model = engine.bundle.model
    split = decoder_and_head(model)
    if split is None:
        return torch.log_softmax(model(input_ids=ids, use_cache=False).logits[0, :-1].float(), dim=-1)
    decoder, head, softcap = split
    hidden = decoder(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False).last_hidden_state[0, :-1]
    parts = []
    for start in range(0, hidden.shape[0], HEAD_CHUNK):
        logits = head(hidden[start:start + HEAD_CHUNK]).float()
        if softcap:
            logits = torch.tanh(logits / softcap) * softcap
        parts.append(torch.log_softmax(logits, dim=-1))
    return torch.cat(parts) if parts else torch.zeros((0, head.out_features))


def complete_with_logprobs(engine: Any, prompt: str, max_tokens: int, temperature: float = 0.0, top_p: float = 1.0,
                           stop: str | Sequence[str] | None = None, top_n: int = 0, echo: bool = False,
                           ) -> tuple[Completion, dict]:
    """A completion plus an OpenAI ``logprobs`` object (``tokens, token_logprobs, top_logprobs, text_offset``)."""
    import torch

    bundle = getattr(engine, "bundle", None)
    if bundle is None:
        raise MedQAError("logprobs need a local model; this server forwards to a remote one (drop logprobs)")
    model, tok = bundle.model, bundle.tokenizer
    if not isinstance(prompt, str) or not prompt:
        raise MedQAError("prompt is empty; give some text to continue")
    stops = normalize_stops(stop)
    ids_list = encode(tok, prompt)
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit and len(ids_list) + max_tokens > limit:
        raise MedQAError(f"prompt has {len(ids_list)} tokens; with max_tokens={max_tokens} that exceeds the model's "
                         f"context of {limit} tokens: shorten the prompt or lower max_tokens")
    device = next(model.parameters()).device
    ids = torch.tensor([ids_list], dtype=torch.long, device=device)
    T = ids.shape[1]
    kw = generate_kwargs(tok, max_tokens, temperature, top_p, 1.0)
    threads = engine.cpu_threads() if hasattr(engine, "cpu_threads") else _null()
    with engine.lock, threads, torch.inference_mode():
        crit = make_stopping_criteria(tok, T, stops) if stops else None
        out = model.generate(ids, attention_mask=torch.ones_like(ids), stopping_criteria=crit, output_logits=True,
                             return_dict_in_generate=True, **kw)
        new = out.sequences[0, T:].tolist()
        step_lp = torch.log_softmax(torch.stack([x[0] for x in out.logits]).float(), dim=-1) if new else None
        prompt_lp = _prompt_logprobs(engine, ids) if echo else None
    done = finish(tok, new, stops, eos_ids(model, tok), max_tokens, T)

    tokens: list[str] = []
    values: list[float | None] = []
    tops: list[dict | None] = []
    offsets: list[int] = []
    if echo:
        first = 1 if tok.bos_token_id is not None and ids_list[0] == tok.bos_token_id else 0
        # The first listed token has no log-probability (OpenAI convention); prompt_lp row p-1 predicts position p.
        head = _piece(tok, None, ids_list[first])
        tokens, values, tops, offsets = [head], [None], [None], [0]
        pos = len(head)
        for s_, lp, top in _rows(tok, prompt_lp[first:], ids_list[first + 1:], ids_list[first:-1], top_n):
            tokens.append(s_)
            values.append(lp)
            tops.append(top)
            offsets.append(pos)
            pos += len(s_)
    base = len(prompt) if echo else 0
    if new:
        pos = 0
        for n, (s_, lp, top) in enumerate(_rows(tok, step_lp, new, [ids_list[-1]] + new[:-1], top_n)):
            if n > 0 and pos >= len(done.text):
                break  # past a stop string or EOS (the first generated token is always listed)
            tokens.append(s_)
            values.append(lp)
            tops.append(top)
            offsets.append(base + pos)
            pos += len(s_)
    return done, {"tokens": tokens, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}


class _null:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None

