"""Chat messages -> one prompt for the engine's text completion.

* A tokenizer with a chat template (instruction-tuned models) renders the messages with it.
* Otherwise (the embedded Gemma 270M base model, and adapters trained with the project template)
  the conversation is written in the project's ``### Question: / ### Answer:`` format; when the last
  user message is a multiple-choice question (``... A) x B) y``), it is rendered exactly like the
  training prompt (:func:`medqa.prompts.render_prompt`), so a fine-tuned adapter sees its own format.

Default stop strings end the reply before the model starts writing the next question.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..prompts import render_prompt
from ..records import MAX_OPTIONS, MIN_OPTIONS, MCQItem, MedQAError

CHAT_STOPS = ["\n### Question", "\n### Context", "\n### Options"]


def _user_block(text: str) -> str:
    from ..engine.options import split_question_options

    question, options = split_question_options(text)
    if question and MIN_OPTIONS <= len(options) <= MAX_OPTIONS and all(o.strip() for o in options):
        return render_prompt(MCQItem(id="chat", question=question, options=options))
    return f"### Question:\n{text.strip()}\n\n### Answer:\n"


def render_chat(messages: Sequence[Any], tokenizer: Any = None) -> tuple[str, list[str]]:
    """(prompt, default stop strings) for OpenAI-style messages (objects with ``role`` and ``text()``)."""
    turns = [(m.role, m.text()) for m in messages]
    if not any(role == "user" and text.strip() for role, text in turns):
        raise MedQAError("messages need at least one non-empty user message")
    if turns[-1][0] == "assistant":
        raise MedQAError("the last message is from the assistant; end with a user message to get a reply")
    template = getattr(tokenizer, "chat_template", None) if tokenizer is not None else None
    if template:
        roles = {"developer": "system", "tool": "user"}
        msgs = [{"role": roles.get(r, r), "content": t} for r, t in turns]
        return tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True), []
    parts: list[str] = []
    for role, text in turns:
        if not text.strip():
            continue
        if role in ("system", "developer"):
            parts.append(text.strip() + "\n\n")
        elif role in ("user", "tool"):
            parts.append(_user_block(text))
        else:  # assistant
            parts.append(text.strip() + "\n\n")
    return "".join(parts), list(CHAT_STOPS)
