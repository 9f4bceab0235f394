"""A dataset report: what a user should look at before training or evaluating on a file.

The answer-letter distribution gives the majority-class baseline; coverage numbers say whether
explanations/contexts exist to train on; duplicates and skipped rows flag data problems.
"""
from __future__ import annotations

from collections import Counter
from typing import Any

from ..records import LETTERS
from .io import Loaded
from .split import normalize_question

TOP_SUBJECTS = 15
MAX_PROBLEMS = 50
MAX_EXAMPLES = 5


def _pct(count: int, total: int) -> float:
    return round(100.0 * count / total, 1) if total else 0.0


def _coverage(count: int, total: int) -> dict[str, Any]:
    return {"count": count, "pct": _pct(count, total)}


def _answers(loaded: Loaded) -> dict[str, Any]:
    """Counts and % per answer letter over labeled items, with the option text when it is shared
    by every item (PubMedQA's yes/no/maybe)."""
    items = loaded.items
    labeled = [it for it in items if it.answer is not None]
    counts = Counter(it.answer_letter for it in labeled)
    width = max((len(it.options) for it in items), default=0)
    shared = items[0].options if items and all(it.options == items[0].options for it in items) else None
    dist = {}
    for i, letter in enumerate(LETTERS[:width]):
        entry: dict[str, Any] = {"count": counts.get(letter, 0), "pct": _pct(counts.get(letter, 0), len(labeled))}
        if shared:
            entry["label"] = shared[i]
        dist[letter] = entry
    majority = max(dist.values(), key=lambda e: e["count"])["pct"] if labeled else 0.0
    return {
        "labeled": len(labeled),
        "unlabeled": len(items) - len(labeled),
        "distribution": dist,
        "majority_baseline_pct": majority,
    }


def _duplicates(loaded: Loaded) -> dict[str, Any]:
    """Questions that repeat after normalisation (same text, modulo case/punctuation/spacing)."""
    groups = Counter(normalize_question(it.question) for it in loaded.items)
    repeated = {q: n for q, n in groups.items() if n > 1}
    first_text = {}
    for it in loaded.items:
        first_text.setdefault(normalize_question(it.question), it.question)
    examples = [first_text[q][:100] for q in list(repeated)[:MAX_EXAMPLES]]
    return {"groups": len(repeated), "extra_items": sum(n - 1 for n in repeated.values()), "examples": examples}


def _problems(loaded: Loaded) -> list[dict[str, Any]]:
    return [{"where": e.where, "field": e.field, "message": e.reason} for e in loaded.skipped[:MAX_PROBLEMS]]


def inspect_items(loaded: Loaded) -> dict[str, Any]:
    """A JSON-serialisable report on ``loaded``: counts, answer/option/subject distributions,
    explanation and context coverage, duplicate questions and the rows that failed validation."""
    items = loaded.items
    n = len(items)
    subjects = Counter(it.subject for it in items if it.subject)
    lengths = [len(it.question) for it in items]
    return {
        "source": loaded.source,
        "dataset": loaded.dataset,
        "n_items": n,
        "n_read": loaded.n_read,
        "n_skipped": len(loaded.skipped),
        "notes": list(loaded.notes),
        "answers": _answers(loaded),
        "option_counts": {str(k): v for k, v in sorted(Counter(len(it.options) for it in items).items())},
        "subjects": {
            "distinct": len(subjects),
            "missing": n - sum(subjects.values()),
            "top": [[s, c] for s, c in subjects.most_common(TOP_SUBJECTS)],
        },
        "explanation_coverage": _coverage(sum(1 for it in items if it.explanation.strip()), n),
        "context_coverage": _coverage(sum(1 for it in items if it.context.strip()), n),
        "items_with_repeated_options": sum(1 for it in items if len(set(it.options)) < len(it.options)),
        "question_chars": {"mean": round(sum(lengths) / n, 1) if n else 0, "max": max(lengths, default=0)},
        "duplicate_questions": _duplicates(loaded),
        "problems": _problems(loaded),
    }


def _format_answers(answers: dict[str, Any]) -> list[str]:
    lines = [f"answers: {answers['labeled']:,} labeled, {answers['unlabeled']:,} unlabeled"]
    for letter, e in answers["distribution"].items():
        label = f" ({e['label']})" if "label" in e else ""
        lines.append(f"  {letter}{label}: {e['count']:>7,}  {e['pct']:5.1f} %")
    if answers["labeled"]:
        lines.append(f"  majority-class baseline: {answers['majority_baseline_pct']:.1f} %")
    return lines


def _format_problems(report: dict[str, Any]) -> list[str]:
    if not report["n_skipped"]:
        return ["validation problems: none"]
    lines = [f"validation problems: {report['n_skipped']:,} rows skipped"]
    for p in report["problems"]:
        field = f" field '{p['field']}'" if p["field"] else ""
        lines.append(f"  {p['where']}{field}: {p['message']}")
    if report["n_skipped"] > len(report["problems"]):
        lines.append(f"  ... and {report['n_skipped'] - len(report['problems']):,} more")
    return lines


def format_report(report: dict[str, Any]) -> str:
    """The report as plain text for the terminal."""
    cov = lambda c: f"{c['count']:,} ({c['pct']:.1f} %)"  # noqa: E731
    subj = report["subjects"]
    dup = report["duplicate_questions"]
    lines = [
        f"source:   {report['source']}",
        f"dataset:  {report['dataset']}",
        f"items:    {report['n_items']:,} ({report['n_read']:,} rows read, {report['n_skipped']:,} skipped)",
    ]
    lines += [f"note:     {note}" for note in report["notes"]]
    lines += _format_answers(report["answers"])
    opts = ", ".join(f"{k} options: {v:,}" for k, v in report["option_counts"].items())
    lines.append(f"option counts: {opts or 'n/a'}")
    lines.append(f"subjects: {subj['distinct']} distinct, {subj['missing']:,} items without one")
    lines += [f"  {name}: {count:,}" for name, count in subj["top"]]
    lines.append(f"explanations: {cov(report['explanation_coverage'])}")
    lines.append(f"contexts:     {cov(report['context_coverage'])}")
    lines.append(f"items with repeated option texts: {report['items_with_repeated_options']:,}")
    qc = report["question_chars"]
    lines.append(f"question length: mean {qc['mean']} chars, max {qc['max']:,}")
    lines.append(f"duplicate questions: {dup['groups']:,} groups, {dup['extra_items']:,} extra items")
    lines += [f"  e.g. {ex!r}" for ex in dup["examples"]]
    lines += _format_problems(report)
    return "\n".join(lines)
