"""Token streaming for OpenAI-style ``stream=true`` completions (``transformers.TextIteratorStreamer``).

``model.generate`` runs in a worker thread that holds the engine lock; this generator relays the
decoded pieces.  If the consumer stops early (client disconnect -> ``close()``), a cancel event
makes the worker's stopping criterion end generation at the next token, releasing the lock.
"""
from __future__ import annotations

import threading
from typing import Any, Iterator, Sequence

from ..records import MedQAError
from .generation import make_stopping_criteria

# Seconds the consumer waits for the next piece before giving up on a stuck worker.
PIECE_TIMEOUT_S = 600.0


def stream_completion(engine: Any, ids: Any, stops: Sequence[str], gen_kw: dict, seed: int | None = None) -> Iterator[str]:
    """Yield decoded text pieces of the continuation of prompt ids ``(1, T)``."""
    import torch
    from transformers import TextIteratorStreamer

    model, tok = engine.bundle.model, engine.bundle.tokenizer
    cancel, errors = threading.Event(), []
    streamer = TextIteratorStreamer(tok, skip_prompt=True, timeout=PIECE_TIMEOUT_S, skip_special_tokens=True)
    criteria = make_stopping_criteria(tok, ids.shape[1], stops, cancel)

    def work() -> None:
        try:
            with engine.lock, torch.inference_mode(), engine.cpu_threads():
                if seed is not None:
                    torch.manual_seed(seed)
                model.generate(ids, attention_mask=torch.ones_like(ids), streamer=streamer,
                               stopping_criteria=criteria, **gen_kw)
        except BaseException as e:  # surface in the consumer; end() unblocks its loop
            errors.append(e)
            streamer.end()

    worker = threading.Thread(target=work, name="medqa-stream", daemon=True)
    worker.start()
    try:
        for piece in streamer:
            if piece:
                yield piece
    finally:
        cancel.set()  # no-op if generation already ended; stops it if the consumer left early
    worker.join()
    if errors:
        raise MedQAError(f"generation failed: {type(errors[0]).__name__}: {errors[0]}") from errors[0]
