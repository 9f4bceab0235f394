"""Text generation for explanations and OpenAI-style completions: stop strings, EOS, token limits, streaming.

Stop strings are checked on *decoded text*, not token ids, because a marker such as ``###`` can be
produced by many different token splits (``"###"``, ``"##" + "#"``, ``"\\n###"``...).  Generation stops
as soon as the text contains one (so no compute is spent past it) and the text is then cut before it.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Literal, Sequence

from ..records import MedQAError

FinishReason = Literal["stop", "length"]


@dataclass
class Completion:
    """A finished generation (the server maps these fields onto OpenAI's ``choices``/``usage``)."""

    text: str
    finish_reason: FinishReason  # "stop": EOS or a stop string; "length": hit max_tokens
    prompt_tokens: int
    completion_tokens: int


def normalize_stops(stop: str | Sequence[str] | None) -> list[str]:
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else list(stop)
    if not all(isinstance(s, str) for s in stops):
        raise MedQAError("stop must be a string or a list of strings")
    return [s for s in stops if s]


def cut_at_stop(text: str, stops: Sequence[str]) -> tuple[str, bool]:
    """``text`` up to the earliest stop string, and whether one was found."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return (text[: min(hits)], True) if hits else (text, False)


def eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """Every id that ends generation: the tokenizer's EOS plus the generation config's (Gemma lists several)."""
    ids: set[int] = set()
    cfg = getattr(model, "generation_config", None)
    for value in (getattr(cfg, "eos_token_id", None), tokenizer.eos_token_id):
        if isinstance(value, int):
            ids.add(value)
        elif value:
            ids.update(int(v) for v in value)
    return ids


def make_stopping_criteria(tokenizer: Any, prompt_len: int, stops: Sequence[str], cancel: threading.Event | None = None):
    """A StoppingCriteriaList that ends generation at a stop string in the new text or when ``cancel`` is set."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    longest = max((len(s) for s in stops), default=0)

    class _StopOnText(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            done = cancel is not None and cancel.is_set()
            if not done and stops:
                # Decoding only the tail keeps this O(1) per step; 4 chars per token is a generous bound.
                tail = input_ids[0, prompt_len:][-(longest + 8):]
                done = cut_at_stop(tokenizer.decode(tail, skip_special_tokens=True), stops)[1]
            return torch.full((input_ids.shape[0],), done, dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([_StopOnText()])


def generate_kwargs(
    tokenizer: Any,
    max_tokens: int,
    temperature: float,
    top_p: float,
    repetition_penalty: float,
    logits_processor: Any = None,
) -> dict:
    """``model.generate`` keyword arguments; temperature 0 means greedy (deterministic)."""
    if max_tokens < 1:
        raise MedQAError(f"max_tokens must be at least 1 (got {max_tokens})")
    if temperature < 0 or repetition_penalty <= 0 or not 0 < top_p <= 1:
        raise MedQAError(
            f"bad sampling settings: temperature={temperature} (>= 0), top_p={top_p} (0-1], "
            f"repetition_penalty={repetition_penalty} (> 0)"
        )
    kw: dict = dict(max_new_tokens=max_tokens, pad_token_id=tokenizer.pad_token_id, repetition_penalty=repetition_penalty)
    if temperature > 0:
        kw.update(do_sample=True, temperature=temperature, top_p=top_p)
    else:
        # Explicit, so a Hub model whose generation_config says do_sample=True still answers greedily.
        kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    if logits_processor is not None:
        from transformers import LogitsProcessorList

        kw["logits_processor"] = LogitsProcessorList(
            logits_processor if isinstance(logits_processor, (list, tuple)) else [logits_processor]
        )
    return kw


def finish(tokenizer: Any, new_ids: Sequence[int], stops: Sequence[str], eos: set[int], max_tokens: int, prompt_len: int) -> Completion:
    """Decode the generated ids, cut at a stop string, and say why generation ended."""
    text, stopped = cut_at_stop(tokenizer.decode(list(new_ids), skip_special_tokens=True), stops)
    hit_eos = bool(new_ids) and int(new_ids[-1]) in eos
    reason: FinishReason = "stop" if stopped or hit_eos or len(new_ids) < max_tokens else "length"
    return Completion(text, reason, prompt_len, len(new_ids))


def hold_back_stops(pieces: Iterable[str], stops: Sequence[str]) -> Iterator[str]:
    """Re-chunk streamed text so no stop string (or its start) is ever emitted; ends at the first stop.

    A stop string can straddle two pieces, so the last ``len(longest stop) - 1`` characters are held
    back until the next piece shows they are not the start of one.
    """
    hold = max((len(s) for s in stops), default=1) - 1
    buf = ""
    try:
        for piece in pieces:
            buf += piece
            head, stopped = cut_at_stop(buf, stops)
            if stopped:
                if head:
                    yield head
                return
            if len(buf) > hold:
                cut = len(buf) - hold
                yield buf[:cut]
                buf = buf[cut:]
        if buf:
            yield buf
    finally:  # stop the producer now (cancels local generation, closes a remote stream), not at GC time
        close = getattr(pieces, "close", None)
        if close is not None:
            close()


def oversubscribed() -> bool:
    """True when the 1-minute load average is at least the core count (a shared, busy CPU).

    Measured on 2 cores with one other busy process (load ~3.5): ``ask`` took 46-55 s with 2 torch
    threads and 12-17 s with 1, so the threshold is "every core already busy", not "twice over"."""
    import os

    try:
        return os.getloadavg()[0] >= (os.cpu_count() or 1)
    except OSError:  # not available on this platform
        return False


def thread_count(setting: int | str, on_cpu: bool) -> int | None:
    """torch intra-op threads to use for one model call, or None to leave torch's setting alone.

    Why "auto" drops to 1 thread on a busy CPU: torch's thread pool waits at a barrier after every
    op for threads the OS is not scheduling, so the many small ops of a decode step run 3-5x slower
    with 2 threads than with 1 on an oversubscribed 2-core machine (measured on Gemma 3 270M).
    """
    if setting == "auto":
        return 1 if on_cpu and oversubscribed() else None
    if isinstance(setting, bool) or not isinstance(setting, int) or setting < 0:
        raise MedQAError(f"threads must be 'auto' or a number >= 0 (got {setting!r}); 0 keeps torch's default")
    return setting or None


class torch_threads:
    """Context manager: run the body with ``n`` torch threads (None = unchanged), then restore."""

    def __init__(self, n: int | None):
        self.n, self.before = n, None

    def __enter__(self) -> None:
        if self.n:
            import torch

            self.before = torch.get_num_threads()
            torch.set_num_threads(self.n)

    def __exit__(self, *exc) -> None:
        if self.before is not None:
            import torch

            torch.set_num_threads(self.before)


def trim_to_sentence(text: str) -> str:
    """Cut a length-limited explanation after its last full sentence if that keeps at least half of it."""
    ends = [m.end() for m in re.finditer(r"[.!?](?=\s|$)", text)]
    if ends and ends[-1] >= len(text) // 2:
        return text[: ends[-1]]
    return text + "…" if text else text
