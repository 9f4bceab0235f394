"""One-forward-pass option scoring with a local Hugging Face causal LM.

For each question we run the prompt once and read the next-token distribution at the answer
position, restricted to the option-letter tokens.  What makes it fast (cf. lm-evaluation-harness,
which materialises full-vocabulary logits at *every* position):

* only the base model (decoder stack) runs over the sequence; the LM head (640 x 262k for Gemma 3)
  is applied to one hidden state per row — ``(B, H) -> (B, V)`` instead of ``(B, T, V)``;
* prompts are sorted by token length and batched, so rows in a batch need little padding;
* right padding: every real token sits at its natural position (0..L-1), so no ``position_ids``
  bookkeeping is needed; the answer position of each row is gathered from the attention mask.

Tokenizer traps handled here: letters are resolved *in context* (``" A"`` after ``Answer:`` is a
different token from ``"A"`` after a newline, see :func:`medqa.prompts.letter_token_ids`), prompts get
exactly one BOS (:func:`medqa.prompts.encode`), and the pad id is only a filler — the scored position
comes from the attention mask, never from ``input_ids == pad`` (pad may equal EOS).
"""
from __future__ import annotations

import logging
import time
from typing import Sequence

from ..modeling import decoder_and_head
from ..prompts import encode, letter_token_ids, render_prompt
from ..records import MCQItem, MedQAError

log = logging.getLogger(__name__)


class HFScorer:
    """Scores MCQ items with a local HF causal LM; see the module docstring for the method.

    ``score`` returns, per item, natural-log probabilities over *that item's* K options
    (normalised over the K letter tokens).  After each call ``last_letter_mass`` holds, per item,
    the share of the full next-token distribution that fell on the valid letters — a prompt-format
    health check (a base model that wants to write "The answer is" puts little mass on letters).
    """

    name = "hf"

    def __init__(self, model, tokenizer, style: str = "medqa", batch_size: int = 8,
                 max_length: int | None = None, progress: bool = False):
        if batch_size < 1:
            raise MedQAError(f"--batch-size must be at least 1 (got {batch_size})")
        self.model, self.tokenizer, self.style = model, tokenizer, style
        self.batch_size, self.progress = batch_size, progress
        self.letter_ids = list(letter_token_ids(tokenizer, style).ids)  # (K_max,)
        cfg_max = getattr(getattr(model, "config", None), "max_position_embeddings", None) or 4096
        self.max_length = int(max_length or min(cfg_max, 8192))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else (tokenizer.eos_token_id or 0)
        self._split = decoder_and_head(model)
        self.truncated = 0
        self.last_letter_mass: list[float] = []
        self.last_seconds = 0.0

    @property
    def device(self):
        return next(self.model.parameters()).device

    def encode_items(self, items: Sequence[MCQItem], evidence: Sequence[str | None] | None = None) -> list[list[int]]:
        """Token ids per prompt (one BOS), left-truncated to ``max_length`` keeping the BOS.

        We cut from the left because the end of the prompt (options, ``Answer:``) is what the
        answer position must see; long PubMedQA contexts lose their beginning instead.
        """
        evidence = evidence if evidence is not None else [None] * len(items)
        if len(evidence) != len(items):
            raise MedQAError(f"got {len(evidence)} evidence strings for {len(items)} items; pass one per item")
        out, cut = [], 0
        for item, ev in zip(items, evidence):
            ids = encode(self.tokenizer, render_prompt(item, self.style, evidence=ev))
            if len(ids) > self.max_length:
                cut += 1
                keep_bos = ids[:1] if ids[0] == self.tokenizer.bos_token_id else []
                ids = keep_bos + ids[len(ids) - (self.max_length - len(keep_bos)):]
            out.append(ids)
        if cut:
            self.truncated += cut
            log.warning("%d prompt(s) longer than %d tokens were cut from the left", cut, self.max_length)
        return out

    def score(self, items: Sequence[MCQItem], evidence: Sequence[str | None] | None = None) -> list[list[float]]:
        import torch

        t0 = time.perf_counter()
        for item in items:
            if len(item.options) > len(self.letter_ids):
                raise MedQAError(f"item {item.id} has {len(item.options)} options; at most {len(self.letter_ids)} are supported")
        ids = self.encode_items(items, evidence)
        n_opts = [len(it.options) for it in items]
        # Longest first: an out-of-memory batch shows up immediately, not at the end of a long run.
        order = sorted(range(len(items)), key=lambda i: len(ids[i]), reverse=True)
        rows: list[list[float] | None] = [None] * len(items)
        mass: list[float] = [0.0] * len(items)
        bar = _progress(len(items), self.progress)
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                batch = order[start:start + self.batch_size]
                logp, m = self._score_batch([ids[i] for i in batch], [n_opts[i] for i in batch])
                for j, i in enumerate(batch):
                    rows[i] = logp[j, : n_opts[i]].tolist()
                    mass[i] = float(m[j])
                bar.update(len(batch))
        bar.close()
        self.last_letter_mass = mass
        self.last_seconds = time.perf_counter() - t0
        return rows  # type: ignore[return-value]

    def _score_batch(self, batch_ids: list[list[int]], n_opts: list[int]):
        """Log-probs over options ``(B, K_max)`` (-inf beyond each row's K) and letter mass ``(B,)``."""
        import torch

        dev = self.device
        B, T = len(batch_ids), max(len(x) for x in batch_ids)
        input_ids = torch.full((B, T), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, T), dtype=torch.long)
        for r, x in enumerate(batch_ids):  # right padding: real tokens keep positions 0..L-1
            input_ids[r, : len(x)] = torch.tensor(x, dtype=torch.long)
            attn[r, : len(x)] = 1
        input_ids, attn = input_ids.to(dev), attn.to(dev)
        last = attn.sum(dim=1) - 1  # (B,) index of each row's last real token = answer position
        logits = self._last_logits(input_ids, attn, last).float()  # (B, V)
        full_lse = torch.logsumexp(logits, dim=-1)  # (B,)
        letters = logits[:, self.letter_ids]  # (B, K_max)
        k = torch.arange(letters.shape[1], device=letters.device)[None, :]  # (1, K_max)
        valid = k < torch.tensor(n_opts, device=letters.device)[:, None]  # (B, K_max)
        letters = letters.masked_fill(~valid, float("-inf"))
        opt_lse = torch.logsumexp(letters, dim=-1, keepdim=True)  # (B, 1)
        mass = torch.exp(opt_lse.squeeze(1) - full_lse)  # (B,)
        return (letters - opt_lse).cpu(), mass.cpu()

    def _last_logits(self, input_ids, attn, last):
        """Next-token logits at each row's answer position, ``(B, V)``, with the LM head on B vectors only."""
        import torch

        rows = torch.arange(input_ids.shape[0], device=input_ids.device)
        if self._split is None:  # unknown architecture: full forward, still only one pass
            out = self.model(input_ids=input_ids, attention_mask=attn, use_cache=False)
            return out.logits[rows, last]
        decoder, head, softcap = self._split
        hidden = decoder(input_ids=input_ids, attention_mask=attn, use_cache=False).last_hidden_state  # (B, T, H)
        logits = head(hidden[rows, last])  # (B, H) -> (B, V)
        if softcap:  # Gemma 2 style final-logit soft-capping, as in the model's own forward
            logits = torch.tanh(logits / softcap) * softcap
        return logits


def _progress(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="q", disable=not enabled, desc="scoring", leave=False)


def scorer_from_bundle(bundle, style: str = "medqa", batch_size: int = 8, **kw) -> HFScorer:
    """An :class:`HFScorer` for a :class:`medqa.modeling.ModelBundle`."""
    scorer = HFScorer(bundle.model, bundle.tokenizer, style=style, batch_size=batch_size, **kw)
    scorer.name = f"hf:{bundle.model_id}" + (f"+{bundle.adapter}" if bundle.adapter else "")
    return scorer
