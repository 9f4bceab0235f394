"""Human-readable rendering of an :class:`~medqa.engine.AnswerResult` (``medqa ask`` without ``--json``).

Example::

    Answer: B) Heparin
    Confidence: 0.62 (medium; temperature 1.30, calibrated)

      A) Aspirin    ██░░░░░░░░ 0.21
    > B) Heparin    ██████░░░░ 0.62
      C) Warfarin   ██░░░░░░░░ 0.17

    Explanation:
      Heparin acts immediately ...

    Not medical advice: ...

When the engine abstains the first line says so and lists the plausible options instead of
presenting the top option as the answer.
"""
from __future__ import annotations

import textwrap
from typing import Any

from .records import LETTERS

BAR_WIDTH = 10
OPTION_WIDTH = 44  # option text is cut to this many characters in the probability table
WRAP = 88


def prob_bar(p: float, width: int = BAR_WIDTH) -> str:
    """``0.62`` -> ``"██████░░░░"`` (rounded to the nearest of ``width`` cells)."""
    filled = max(0, min(width, round(p * width)))
    return "█" * filled + "░" * (width - filled)


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def probability_table(result: Any) -> list[str]:
    """One line per option: marker for the chosen one, letter, text, bar, probability."""
    texts = [_clip(o, OPTION_WIDTH) for o in result.options]
    width = max(len(t) for t in texts)
    lines = []
    for (letter, p), text in zip(result.probabilities.items(), texts):
        mark = ">" if letter == result.answer_letter else " "
        lines.append(f"{mark} {letter}) {text.ljust(width)}  {prob_bar(p)} {p:.2f}")
    return lines


def headline(result: Any) -> list[str]:
    """The answer line(s), or the abstention wording with the plausible options."""
    if not result.abstained:
        return [f"Answer: {result.answer_letter}) {result.answer_text}"]
    if result.abstain_reason == "conformal_set":
        why = f"the calibrated prediction set still holds {len(result.plausible)} options"
    else:
        # 3 decimals: 0.4996 must not print as "0.50, below the 0.50 threshold"
        why = f"the top option scores {result.confidence:.3f}, below the {result.abstain_below:.3g} confidence threshold"
    plausible = "; ".join(f"{L}) {_clip(result.options[LETTERS.index(L)], 60)} ({result.probabilities[L]:.2f})"
                          for L in result.plausible)
    return [f"No confident answer: {why}.", f"Plausible options: {plausible}"]


def format_answer(result: Any, show_evidence: bool = True) -> str:
    """The full human-readable answer, always ending with the not-medical-advice note."""
    cal = f"temperature {result.temperature:.2f}, " + ("calibrated" if result.calibrated else "uncalibrated")
    lines = headline(result)
    lines.append(f"Confidence: {result.confidence:.2f} ({result.confidence_label}; {cal})")
    lines += ["", *probability_table(result)]
    if result.explanation:
        title = (f"Explanation of the top option {result.answer_letter} (tentative: not a confident answer):"
                 if result.abstained else "Explanation:")
        lines += ["", title, *_wrap(result.explanation)]
    if result.citations:
        lines.append(f"Cited: {', '.join('[' + c + ']' for c in result.citations)}")
    if show_evidence and result.evidence:
        lines += ["", "Evidence:"]
        for p in result.evidence:
            src = f" ({p.source})" if p.source else ""
            lines += _wrap(f"[{p.id}]{src} {_clip(p.text, 300)}")
    lines += ["", *textwrap.wrap(result.disclaimer, WRAP)]
    return "\n".join(lines)


def _wrap(text: str) -> list[str]:
    out = []
    for para in text.splitlines() or [""]:
        out += textwrap.wrap(para, WRAP, initial_indent="  ", subsequent_indent="  ") or [""]
    return out
