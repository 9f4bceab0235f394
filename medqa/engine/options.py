"""Turn user text into a validated :class:`MCQItem`: ``"A) x B) y"`` option strings and free-text questions.

Option markers may be ``A)``, ``A.``, ``A:``, ``(A)`` or ``[A]``, upper or lower case, inline or one
per line.  To avoid cutting at a letter that merely looks like a marker (``"Vitamin B. deficiency"``),
markers must run in alphabetical order from A and all use the style and case of the first one.
"""
from __future__ import annotations

import hashlib
import re
from typing import Sequence

from ..records import LETTERS, MAX_OPTIONS, MIN_OPTIONS, DataError, MCQItem, MedQAError

# A marker starts the text or follows whitespace, and is followed by whitespace or the end.
_MARKER = re.compile(r"(?:(?<=\s)|^)(?P<m>\((?P<l1>[A-Za-z])\)|\[(?P<l2>[A-Za-z])\]|(?P<l3>[A-Za-z])[).:])(?=\s|$)")
# Text allowed before the first marker of an --options string: a short label such as "Options:".
_LABEL = re.compile(r"^(options|choices|answers?)\s*:?$", re.IGNORECASE)


def _style(m: re.Match) -> tuple[str, bool]:
    """(marker shape with the letter replaced by '?', is-uppercase) so markers can be compared."""
    letter = m.group("l1") or m.group("l2") or m.group("l3")
    return m.group("m").replace(letter, "?", 1), letter.isupper()


def _letter(m: re.Match) -> str:
    return (m.group("l1") or m.group("l2") or m.group("l3")).upper()


def _line_start(text: str, m: re.Match) -> bool:
    return m.start() == 0 or text[: m.start()].rstrip(" \t").endswith("\n")


def _chain_from(text: str, found: list[re.Match], first_a: re.Match) -> list[re.Match]:
    """Markers B, C, ... after ``first_a`` in its style and case.

    When a letter has several candidates (``"A. Vitamin B. B. Iron C. Zinc"``), one at the start of a
    line wins; otherwise the last one before the next letter's first candidate (the earlier ones are
    then inside an option's text), or the first one for the final letter.
    """
    same = [m for m in found if m.start() >= first_a.start() and _style(m) == _style(first_a)]
    chain = [first_a]
    while True:
        letter = chr(ord(_letter(chain[-1])) + 1)
        cands = [m for m in same if m.start() >= chain[-1].end() and _letter(m) == letter]
        if not cands:
            return chain
        after = next((m for m in same if m.start() > cands[0].end() and _letter(m) == chr(ord(letter) + 1)), None)
        window = [m for m in cands if after is None or m.start() < after.start()]
        at_line_start = [m for m in window if _line_start(text, m)]
        chain.append((at_line_start or window)[0] if at_line_start or after is None else window[-1])


def _marker_chain(text: str) -> list[re.Match]:
    """The most convincing run of option markers A, B, C, ...: longest, then with no empty option,
    then starting a line, then latest (an earlier "A:" is likely inside the question, "hepatitis A:")."""
    found = list(_MARKER.finditer(text))
    best, best_key = [], None
    for a in (m for m in found if _letter(m) == "A"):
        chain = _chain_from(text, found, a)
        bounds = [m.start() for m in chain[1:]] + [len(text)]
        nonempty = all(text[m.end():b].strip() for m, b in zip(chain, bounds))
        key = (len(chain), nonempty, _line_start(text, a), a.start())
        if best_key is None or key > best_key:
            best, best_key = chain, key
    return best


def split_question_options(text: str) -> tuple[str, list[str]]:
    """``"Which ...? A) x B) y"`` -> ``("Which ...?", ["x", "y"])``; the question part may be empty."""
    chain = _marker_chain(text)
    if not chain:
        return text.strip(), []
    bounds = [m.start() for m in chain] + [len(text)]
    options = [" ".join(text[m.end():bounds[i + 1]].split()) for i, m in enumerate(chain)]
    return text[: chain[0].start()].strip(), options


def _check_count(options: Sequence[str], what: str) -> None:
    if len(options) < MIN_OPTIONS:
        raise MedQAError(
            f"{what}: found {len(options)} option(s); give {MIN_OPTIONS}-{MAX_OPTIONS}, "
            'e.g. --options "A) Aspirin B) Heparin C) Warfarin" or --option Aspirin --option Heparin'
        )
    if len(options) > MAX_OPTIONS:
        raise MedQAError(
            f"{what}: found {len(options)} options ({LETTERS[0]}-{chr(ord('A') + len(options) - 1)}); "
            f"at most {MAX_OPTIONS} (A-E) are supported: drop the extra options"
        )
    for letter, opt in zip(LETTERS, options):
        if not opt.strip():
            raise MedQAError(f"{what}: option {letter} is empty; give every option some text")


def parse_options_text(text: str) -> list[str]:
    """``"A) x B) y"`` (or ``A.``/``(A)``/``A:`` forms, inline or on separate lines) -> ``["x", "y"]``.

    Raises :class:`MedQAError` for fewer than 2 or more than 5 options, an empty option, or text
    before the first marker (other than a label like ``Options:``).
    """
    if not isinstance(text, str) or not text.strip():
        raise MedQAError('--options is empty; give e.g. --options "A) Aspirin B) Heparin"')
    head, options = split_question_options(text)
    if not options:
        raise MedQAError(
            f"--options {_short(text)!r}: no option markers found; start each option with A), B), ... "
            "(or A., (A), A:), e.g. \"A) Aspirin B) Heparin\""
        )
    if head and not _LABEL.match(head):
        raise MedQAError(
            f"--options has text before the first option marker ({_short(head)!r}); "
            "put the question in the positional argument and only the options in --options"
        )
    _check_count(options, "--options")
    return options


def _short(text: str, n: int = 60) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def content_id(question: str, options: Sequence[str]) -> str:
    """A stable id for an ad-hoc question, so the same question always gets the same id."""
    digest = hashlib.sha1("\x1f".join([question.strip(), *map(str.strip, options)]).encode("utf-8"))
    return "q-" + digest.hexdigest()[:12]


def make_item(
    question: str, options: Sequence[str] | None = None, *, id: str | None = None, context: str = ""
) -> MCQItem:
    """A validated item from a question and options; options embedded in the question are split out.

    Errors are :class:`MedQAError` s (``DataError`` for item fields) saying what to fix.
    """
    if not isinstance(question, str):
        raise DataError(f"question must be text, got {type(question).__name__}", field="question")
    opts = list(options or [])
    if not opts:
        question, opts = split_question_options(question)
        if not opts:
            raise DataError(
                'no options given; pass 2-5 options (--options "A) .. B) .." or --option X --option Y), '
                "or end the question with them",
                field="options",
            )
    if not all(isinstance(o, str) for o in opts):
        raise DataError("every option must be text", field="options")
    opts = [" ".join(o.split()) for o in opts]
    if not question.strip():
        raise DataError("question is empty; give the question text", field="question")
    _check_count(opts, "options")
    return MCQItem(id=id or content_id(question, opts), question=question.strip(), options=opts, context=context)
