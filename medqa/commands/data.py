"""Inspect and validate datasets: counts, answer distribution, coverage, duplicates, bad rows."""
from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    """``medqa data inspect FILE ...`` (argparse only; the data layer is imported in :func:`run`)."""
    sub = parser.add_subparsers(dest="data_command", metavar="ACTION")
    p = sub.add_parser("inspect", help="report on a dataset file, Hub dataset id or task name")
    p.add_argument("file", metavar="FILE", help="a .jsonl/.json/.csv/.parquet file, a Hub dataset id, or a task name")
    p.add_argument("--dataset", metavar="NAME", help="medmcqa, medqa, pubmedqa, mmlu or generic (default: detect)")
    p.add_argument("--cop-base", type=int, choices=(0, 1), help="MedMCQA 'cop' base when it cannot be detected")
    p.add_argument("--on-bad-row", choices=("error", "skip"), default="error", help="stop at or skip bad rows")
    p.add_argument("--split", help="Hub split (default train) or, for a task name, eval/train (default eval)")
    p.add_argument("--config", help="Hub dataset config, e.g. pqa_labeled")
    p.add_argument("--limit", type=int, help="read at most this many items")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(_data_parser=parser)


def _load(args: argparse.Namespace):
    """A task name resolves through TASKS unless a file of that name exists; anything else is a source."""
    from pathlib import Path

    from ..data import TASKS, load_items, resolve_task

    if args.file in TASKS and not Path(args.file).is_file():
        return resolve_task(args.file, args.split or "eval", on_bad_row=args.on_bad_row, limit=args.limit)
    return load_items(
        args.file,
        args.dataset,
        args.split,
        cop_base=args.cop_base,
        on_bad_row=args.on_bad_row,
        limit=args.limit,
        config=args.config,
    )


def run(args: argparse.Namespace) -> int:
    if getattr(args, "data_command", None) != "inspect":
        args._data_parser.print_help()
        return 2
    import json

    from ..data import format_report, inspect_items

    report = inspect_items(_load(args))
    print(json.dumps(report, indent=2, ensure_ascii=False) if args.json else format_report(report))
    return 0
