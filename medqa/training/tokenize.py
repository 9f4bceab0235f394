"""MCQ items → token ids with segment lengths; a length-grouped, resumable batch order; the collator.

An encoded example is ``[prompt][answer][explanation][EOS]``, rendered by :mod:`medqa.prompts` (the one
renderer evaluation and serving use).  Labels are never stored: the collator rebuilds them from the
segment lengths, so a pad id that equals a real token (pad = EOS in many tokenizers) can never mask a
token the model must learn, and EOS is always a supervised target.

Truncation to ``max_length`` cuts the explanation first — at the last sentence end that fits, else
mid-sentence — and never the answer; only if prompt + answer + EOS alone are too long is the prompt cut
from the left (the BOS is kept; the options and ``### Answer:`` survive).  Both counts are reported.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field, replace
from typing import Sequence

from ..prompts import encode, letter_token_ids, render_prompt, render_target
from ..records import MCQItem, MedQAError

IGNORE_INDEX = -100
_SENTENCE_END = re.compile(r"[.!?](?=\s)|[.!?]$|\n")


@dataclass(frozen=True)
class Encoded:
    """One training example. ``input_ids`` = prompt + answer + explanation + eos (lengths below)."""

    item_id: str
    input_ids: tuple[int, ...]
    n_prompt: int
    n_answer: int  # letter + ") option text"
    n_expl: int  # "\n\n### Explanation:\n..." (possibly truncated); 0 without explanation
    n_eos: int  # 1 when EOS is appended

    @property
    def length(self) -> int:
        return len(self.input_ids)


@dataclass
class EncodeStats:
    examples: int = 0
    explanation_cut: int = 0  # explanations shortened to fit max_length
    explanation_dropped: int = 0  # explanations removed entirely to fit
    prompt_cut: int = 0  # prompts cut from the left (prompt + answer alone were too long)
    tokens: int = 0
    supervised: int = 0  # tokens with loss (answer + explanation + eos, prompt masked)
    skipped_unlabeled: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        s = (f"{self.examples} examples, {self.tokens} tokens ({self.tokens / max(1, self.examples):.0f}/example), "
             f"{self.supervised} supervised; explanations cut to fit: {self.explanation_cut}"
             f" (dropped entirely: {self.explanation_dropped}); prompts cut: {self.prompt_cut}")
        if self.skipped_unlabeled:
            s += f"; skipped {self.skipped_unlabeled} unlabeled items"
        return s


class ExampleEncoder:
    """Turns items into :class:`Encoded` examples for one tokenizer and ``max_length``."""

    def __init__(self, tokenizer, max_length: int = 256, with_explanation: bool = True, append_eos: bool = True):
        if tokenizer.eos_token_id is None:
            raise MedQAError(f"tokenizer {type(tokenizer).__name__} has no EOS token; training needs one to learn to stop")
        self.tok, self.max_length = tokenizer, max_length
        self.with_explanation, self.append_eos = with_explanation, append_eos
        self.eos = tokenizer.eos_token_id
        self.letters = letter_token_ids(tokenizer, "medqa").ids  # what the scorer reads after "### Answer:\n"

    def _ids(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"]) if text else []

    def encode(self, item: MCQItem, stats: EncodeStats | None = None) -> Encoded:
        stats = stats if stats is not None else EncodeStats()
        if item.answer is None:
            raise MedQAError(f"item {item.id} has no answer; training needs labelled items")
        prompt = encode(self.tok, render_prompt(item, style="medqa"))
        answer_text = render_target(item, with_explanation=False)
        target_text = render_target(item, with_explanation=self.with_explanation)
        if not target_text.startswith(answer_text):  # the renderer's contract; fail loudly if it changes
            raise MedQAError("render_target(with_explanation) no longer starts with the answer line")
        answer = self._ids(answer_text)
        if not answer or answer[0] != self.letters[item.answer]:
            raise MedQAError(f"item {item.id}: the answer line tokenizes to {answer[:2]} but the scorer reads letter id "
                             f"{self.letters[item.answer]}; training would not teach what evaluation measures")
        expl_text = target_text[len(answer_text):]
        expl = self._ids(expl_text)
        eos = [self.eos] if self.append_eos else []
        budget = self.max_length - len(prompt) - len(answer) - len(eos)
        if len(expl) > max(budget, 0):
            expl = self._cut_explanation(expl_text, expl, max(budget, 0))
            if expl:
                stats.explanation_cut += 1
            else:
                stats.explanation_dropped += 1
        over = len(prompt) + len(answer) + len(expl) + len(eos) - self.max_length
        if over > 0:  # prompt + answer + eos alone exceed max_length: cut the prompt's start, keep BOS
            bos = prompt[:1] if prompt and prompt[0] == self.tok.bos_token_id else []
            rest = prompt[len(bos):]
            if over >= len(rest):
                raise MedQAError(f"item {item.id}: its answer alone is longer than --max-length {self.max_length}; "
                                 "raise --max-length")
            prompt = bos + rest[over:]
            stats.prompt_cut += 1
        ids = tuple(prompt + answer + expl + eos)
        stats.examples += 1
        stats.tokens += len(ids)
        stats.supervised += len(answer) + len(expl) + len(eos)
        return Encoded(item.id, ids, len(prompt), len(answer), len(expl), len(eos))

    def _cut_explanation(self, text: str, ids: list[int], budget: int) -> list[int]:
        """Longest prefix of the explanation within ``budget`` tokens, ending at a sentence end if one fits.

        Keeps a complete "### Explanation:" header plus at least one sentence, or drops the explanation
        (an answer followed directly by EOS is a well-formed target).
        """
        if budget <= 0:
            return []
        head = text.index(":\n") + 2 if ":\n" in text else 0
        partial = self.tok.decode(ids[:budget], skip_special_tokens=False)
        ends = [m.end() for m in _SENTENCE_END.finditer(partial) if m.end() > head + 1]
        for end in reversed(ends[-3:]):  # the last few sentence ends; re-tokenising may shift by a token
            cand = self._ids(partial[:end].rstrip("\n"))
            if len(cand) <= budget and cand == ids[: len(cand)]:
                return cand
        header = self._ids(text[:head]) if head else []
        return ids[:budget] if budget > len(header) + 8 else []

    def encode_all(self, items: Sequence[MCQItem]) -> tuple[list[Encoded], EncodeStats]:
        stats = EncodeStats()
        out = []
        for item in items:
            if item.answer is None:
                stats.skipped_unlabeled += 1
                continue
            out.append(self.encode(item, stats))
        return out, stats


def permuted(item: MCQItem, rng: random.Random) -> MCQItem:
    """The item with its options in a random order (the answer index follows).  The explanation is dropped:
    MedMCQA explanations cite letters ("Ans. is 'a'") that would now be wrong."""
    order = list(range(len(item.options)))
    rng.shuffle(order)
    return replace(item, options=[item.options[j] for j in order], answer=order.index(item.answer), explanation="")


class EpochExamples:
    """Encoded examples per epoch: the originals, or with probability ``p`` per item and epoch an
    option-permuted copy (seeded by (seed, epoch, item), so --resume and every process see the same)."""

    def __init__(self, items: Sequence[MCQItem], encoder: ExampleEncoder, permute: float = 0.0, seed: int = 0):
        self.items = [it for it in items if it.answer is not None]
        self.encoder, self.p, self.seed = encoder, permute, seed
        self.base, self.stats = encoder.encode_all(self.items)
        self._cache: tuple[int, list[Encoded]] | None = None

    def get(self, epoch: int) -> list[Encoded]:
        if self.p <= 0:
            return self.base
        if self._cache is None or self._cache[0] != epoch:
            out = []
            for i, (item, ex) in enumerate(zip(self.items, self.base)):
                rng = random.Random(f"{self.seed}:{epoch}:{i}")
                out.append(self.encoder.encode(permuted(item, rng)) if rng.random() < self.p else ex)
            self._cache = (epoch, out)
        return self._cache[1]


def build_labels(examples: Sequence[Encoded], width: int, train_on_prompt: bool = False) -> list[list[int]]:
    """HF-style labels (IGNORE_INDEX where no loss), built from segment lengths only."""
    rows = []
    for ex in examples:
        start = 1 if train_on_prompt else ex.n_prompt  # the first token has no prediction
        lab = [IGNORE_INDEX] * width
        lab[start: ex.length] = ex.input_ids[start: ex.length]
        rows.append(lab)
    return rows


def token_weights(ex: Encoded, train_on_prompt: bool, letter_w: float, answer_w: float, expl_w: float) -> list[float]:
    """Loss weight of each *target* token position t (predicting ``input_ids[t]``), t = 1..length-1."""
    w = [0.0] * ex.length
    if train_on_prompt:
        for t in range(1, ex.n_prompt):
            w[t] = 1.0
    a0 = ex.n_prompt
    if ex.n_answer:
        w[a0] = letter_w
    for t in range(a0 + 1, a0 + ex.n_answer):
        w[t] = answer_w
    for t in range(a0 + ex.n_answer, a0 + ex.n_answer + ex.n_expl):
        w[t] = expl_w
    for t in range(a0 + ex.n_answer + ex.n_expl, ex.length):  # EOS: learning to stop matters like the answer
        w[t] = answer_w
    return w


class SupervisedCollator:
    """Right-pads a micro-batch and lists the supervised positions.

    Output tensors: ``input_ids``/``attention_mask`` ``(B, T)``, ``labels`` ``(B, T)`` (for inspection and
    HF-style consumers), and the flat loss targets ``rows``/``cols`` (hidden-state index, i.e. the token
    *before* the target), ``targets`` and ``weights`` ``(N,)`` — the loop applies the LM head at these N
    positions only.
    """

    def __init__(self, pad_id: int, train_on_prompt: bool = False, letter_weight: float = 1.0,
                 answer_weight: float = 1.0, explanation_weight: float = 1.0, pad_to_multiple_of: int | None = None):
        self.pad_id = pad_id
        self.train_on_prompt = train_on_prompt
        self.w = (letter_weight, answer_weight, explanation_weight)
        self.multiple = pad_to_multiple_of

    def weights(self, ex: Encoded) -> list[float]:
        return token_weights(ex, self.train_on_prompt, *self.w)

    def total_weight(self, examples: Sequence[Encoded]) -> float:
        return float(sum(sum(self.weights(ex)) for ex in examples))

    def __call__(self, examples: Sequence[Encoded]) -> dict:
        import torch

        T = max(ex.length for ex in examples)
        if self.multiple:
            T = -(-T // self.multiple) * self.multiple
        B = len(examples)
        input_ids = torch.full((B, T), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, T), dtype=torch.long)
        rows, cols, targets, weights = [], [], [], []
        for r, ex in enumerate(examples):
            input_ids[r, : ex.length] = torch.tensor(ex.input_ids, dtype=torch.long)
            attn[r, : ex.length] = 1
            for t, w in enumerate(self.weights(ex)):
                if w > 0:
                    rows.append(r)
                    cols.append(t - 1)
                    targets.append(ex.input_ids[t])
                    weights.append(w)
        return {
            "input_ids": input_ids,
            "attention_mask": attn,
            "labels": torch.tensor(build_labels(examples, T, self.train_on_prompt), dtype=torch.long),
            "rows": torch.tensor(rows, dtype=torch.long),
            "cols": torch.tensor(cols, dtype=torch.long),
            "targets": torch.tensor(targets, dtype=torch.long),
            "weights": torch.tensor(weights, dtype=torch.float32),
            "n_tokens": int(attn.sum()),
        }


class BatchPlan:
    """The seeded order of *global* batches for every epoch; a position is (epoch, batch index).

    A global batch holds ``batch_size × world_size`` examples; process ``rank`` takes its contiguous slice,
    so 1 process with batch 8 and 2 processes with batch 4 see the same examples per step.  With
    ``group_by_length`` examples are shuffled, cut into mega-batches of ``mega`` global batches, sorted by
    length inside each, and the resulting batches shuffled (the longest batch goes first, so an
    out-of-memory error shows up at once).  The order depends only on (seed, epoch): resuming at a
    position replays exactly the batches an uninterrupted run would have seen.
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, world_size: int = 1, seed: int = 0,
                 group_by_length: bool = True, mega: int = 32):
        if not lengths:
            raise MedQAError("no training examples")
        self.lengths = list(lengths)
        self.global_batch = batch_size * world_size
        self.world_size, self.seed, self.group, self.mega = world_size, seed, group_by_length, mega
        self._cache: dict[int, list[list[int]]] = {}

    def epoch(self, epoch: int) -> list[list[int]]:
        if epoch in self._cache:
            return self._cache[epoch]
        rng = random.Random(f"{self.seed}:{epoch}")
        idx = list(range(len(self.lengths)))
        rng.shuffle(idx)
        G = self.global_batch
        if self.group:
            chunk = G * self.mega
            idx = [i for s in range(0, len(idx), chunk)
                   for i in sorted(idx[s: s + chunk], key=lambda i: -self.lengths[i])]
        batches = [idx[s: s + G] for s in range(0, len(idx), G)]
        if batches and len(batches[-1]) < max(self.world_size, 1):
            batches.pop()  # too few to give every process an example
        if self.group and len(batches) > 1:
            longest = max(range(len(batches)), key=lambda b: max(self.lengths[i] for i in batches[b]))
            first = batches.pop(longest)
            rng.shuffle(batches)
            batches.insert(0, first)
        self._cache = {epoch: batches}
        return batches

    def batches_per_epoch(self) -> int:
        return len(self.epoch(0))

    def rank_slice(self, batch: Sequence[int], rank: int) -> list[int]:
        """Process ``rank``'s contiguous share of a global batch (sizes differ by at most one)."""
        n, W = len(batch), self.world_size
        lo = rank * (n // W) + min(rank, n % W)
        return list(batch[lo: lo + n // W + (1 if rank < n % W else 0)])


def steps_per_epoch(batches_per_epoch: int, grad_accum: int) -> int:
    return -(-batches_per_epoch // grad_accum)
