"""Prompt rendering in one place, for training, evaluation and serving.

Project template (style ``medqa``)::

    [### Context:\n<evidence>\n\n]### Question:\n<q>\n\n### Options:\nA) ..\nB) ..\n\n### Answer:\n<L>) <text>\n\n### Explanation:\n<exp><eos>

The scored position is the first token after ``### Answer:\n``; the answer letter there is the bare
letter (``"A"``, no leading space) because it follows a newline.  The lm-evaluation-harness style
(``lmeval``) ends with ``Answer:`` and scores ``" A"`` (leading space), exactly like its MMLU-style tasks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .records import LETTERS, MCQItem, MedQAError

STYLES = ("medqa", "lmeval")
SECTION_MARKER = "###"


def format_evidence(passages: Sequence[tuple[str, str]]) -> str:
    """Render retrieved passages as ``[id] text`` lines so explanations can cite them by id."""
    return "\n".join(f"[{pid}] {text.strip()}" for pid, text in passages)


def render_prompt(item: MCQItem, style: str = "medqa", evidence: str | None = None) -> str:
    """Everything up to the answer letter. ``evidence`` overrides/extends ``item.context``."""
    context = "\n\n".join(x for x in (item.context.strip(), (evidence or "").strip()) if x)
    if style == "medqa":
        opts = "\n".join(f"{L}) {o.strip()}" for L, o in zip(LETTERS, item.options))
        head = f"### Context:\n{context}\n\n" if context else ""
        return f"{head}### Question:\n{item.question.strip()}\n\n### Options:\n{opts}\n\n### Answer:\n"
    if style == "lmeval":
        opts = "\n".join(f"{L}. {o.strip()}" for L, o in zip(LETTERS, item.options))
        head = f"{context}\n" if context else ""
        return f"{head}Question: {item.question.strip()}\nChoices:\n{opts}\nAnswer:"
    raise MedQAError(f"unknown prompt style {style!r}; choose one of {', '.join(STYLES)} (--prompt-style)")


def letter_continuations(n_options: int, style: str = "medqa") -> list[str]:
    """The continuation string scored for each option letter (note the leading space for lmeval)."""
    return [(" " + L if style == "lmeval" else L) for L in LETTERS[:n_options]]


def render_answer(item: MCQItem, answer: int | None = None) -> str:
    """``B) text`` for the given (or gold) answer."""
    idx = item.answer if answer is None else answer
    if idx is None:
        raise MedQAError(f"item {item.id} has no answer to render")
    return f"{LETTERS[idx]}) {item.options[idx].strip()}"


def render_target(item: MCQItem, with_explanation: bool = True) -> str:
    """The supervised continuation after the prompt (EOS is appended at tokenisation, not here)."""
    target = render_answer(item)
    if with_explanation and item.explanation.strip():
        target += f"\n\n### Explanation:\n{item.explanation.strip()}"
    return target


def explanation_prefix(item: MCQItem, answer: int, style: str = "medqa", evidence: str | None = None) -> str:
    """Prompt for generating an explanation conditioned on the chosen answer."""
    return render_prompt(item, style="medqa", evidence=evidence) + render_answer(item, answer) + "\n\n### Explanation:\n"


@dataclass(frozen=True)
class LetterTokens:
    """Token ids of the option letters as they appear *after the prompt*, for one style."""

    ids: tuple[int, ...]  # (K_max,)
    style: str


def letter_token_ids(tokenizer, style: str = "medqa", n: int = len(LETTERS)) -> LetterTokens:
    """Resolve each letter's token id in context, not in isolation.

    Tokenizer trap: ``tok("A")`` and the token that follows ``"Answer:"`` in ``"Answer: A"`` differ for
    SentencePiece/BPE vocabularies (``"A"`` vs ``"▁A"``/``"ĠA"``).  We tokenize ``prompt + letter`` and
    check that it equals ``prompt`` tokens plus exactly one new token, so the scored id is the one the
    model would really produce there.
    """
    probe = render_prompt(MCQItem(id="probe", question="q", options=["x", "y"]), style=style)
    base = tokenizer(probe, add_special_tokens=False)["input_ids"]
    ids = []
    for cont in letter_continuations(n, style):
        full = tokenizer(probe + cont, add_special_tokens=False)["input_ids"]
        if full[: len(base)] != base or len(full) != len(base) + 1:
            raise MedQAError(
                f"tokenizer {type(tokenizer).__name__} does not encode {cont!r} as one token after the prompt; "
                "option scoring needs single-token letters (try --prompt-style medqa)"
            )
        ids.append(full[-1])
    if len(set(ids)) != len(ids):
        raise MedQAError("tokenizer maps two option letters to the same token id")
    return LetterTokens(tuple(ids), style)


def encode(tokenizer, text: str) -> list[int]:
    """Tokenize with exactly the special tokens the model was trained with: one BOS, no EOS.

    Traps: a rendered string that already starts with the BOS text gets a second BOS from
    ``add_special_tokens=True`` (Gemma degrades badly with a double BOS); some tokenizers append EOS,
    which must not sit inside a prompt — targets add EOS explicitly.
    """
    ids = list(tokenizer(text, add_special_tokens=True)["input_ids"])
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    while bos is not None and len(ids) >= 2 and ids[0] == bos and ids[1] == bos:
        ids = ids[1:]
    if eos is not None and eos != bos and ids and ids[-1] == eos and not text.endswith(tokenizer.eos_token or "\0"):
        ids = ids[:-1]
    return ids
