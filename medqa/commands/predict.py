"""Batch prediction over a dataset file: one JSON line per item (schema medqa.answer/1), resumable.

Example::

    medqa predict dev.jsonl --out preds.jsonl --explain --limit 200

Rows are appended (and fsynced) as each batch finishes, keyed by the input item's id; rerunning
the same command skips ids already in ``--out``, so an interrupted run continues where it stopped.
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from .ask import add_model_args, build_engine, check_model_args


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", metavar="IN", help="a .jsonl/.json/.csv/.parquet file of any supported dataset, a task name, or a Hub id")
    parser.add_argument("--out", required=True, metavar="OUT.jsonl", help="where to write one JSON object per item")
    parser.add_argument("--dataset", metavar="NAME", help="medmcqa, medqa, pubmedqa, mmlu or generic (default: detect)")
    parser.add_argument("--split", help="Hub split (default train) or, for a task name, eval/train (default eval)")
    parser.add_argument("--cop-base", type=int, choices=(0, 1), help="MedMCQA 'cop' base when it cannot be detected")
    parser.add_argument("--on-bad-row", choices=("error", "skip"), default="error", help="stop at (default) or skip bad rows")
    parser.add_argument("--limit", type=int, metavar="N", help="predict only the first N items")
    parser.add_argument("--batch-size", type=int, default=8, metavar="B", help="items per forward pass (default 8)")
    parser.add_argument("--explain", action="store_true", help="also generate an explanation per item (slow: ~one generation each)")
    resume = parser.add_mutually_exclusive_group()
    resume.add_argument("--resume", dest="resume", action="store_true", default=True,
                        help="skip ids already in OUT (default)")
    resume.add_argument("--no-resume", dest="resume", action="store_false", help="start OUT afresh (overwrites it)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_model_args(parser)


def repair_tail(path: Path) -> int:
    """Drop a torn last line (a crash mid-write) so appended rows start on a fresh line; returns bytes dropped."""
    if not path.exists():
        return 0
    data = path.read_bytes()
    keep = data.rfind(b"\n") + 1  # 0 when there is no complete line at all
    if keep == len(data):
        return 0
    with open(path, "r+b") as f:
        f.truncate(keep)
    return len(data) - keep


def finished_rows(path: Path, model_name: str) -> list[dict]:
    """Complete rows already in OUT, after checking they can be continued with this model."""
    from ..records import MedQAError
    from ..utils.io import read_jsonl_complete

    dropped = repair_tail(path)
    if dropped:
        print(f"dropped an incomplete last line ({dropped} bytes) left by an interrupted run in {path}")
    rows = read_jsonl_complete(path)
    n_lines = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip()) if path.exists() else 0
    if len(rows) != n_lines or any(not isinstance(r, dict) or "id" not in r for r in rows):
        raise MedQAError(f"{path} has malformed lines, so it cannot be resumed; use another --out or --no-resume")
    others = sorted({r.get("model") for r in rows} - {model_name})
    if others:
        raise MedQAError(
            f"{path} holds predictions from model {others[0]!r}, not {model_name!r}; "
            "use another --out, or --no-resume to overwrite it"
        )
    return rows


def _load(args: argparse.Namespace):
    """A task name (e.g. ``medmcqa``) resolves through TASKS unless a file of that name exists."""
    from ..data import TASKS, load_items, resolve_task

    if args.input in TASKS and not Path(args.input).is_file():
        return resolve_task(args.input, args.split or "eval", on_bad_row=args.on_bad_row, limit=args.limit)
    return load_items(args.input, args.dataset, args.split, cop_base=args.cop_base, on_bad_row=args.on_bad_row,
                      limit=args.limit)


def _check_args(args: argparse.Namespace) -> None:
    from ..records import MedQAError

    check_model_args(args)
    if args.batch_size < 1:
        raise MedQAError(f"--batch-size must be at least 1 (got {args.batch_size})")
    if args.limit is not None and args.limit < 1:
        raise MedQAError(f"--limit must be at least 1 (got {args.limit})")
    if Path(args.out).resolve() == Path(args.input).resolve():
        raise MedQAError("--out is the input file; choose another output path")


def run(args: argparse.Namespace) -> int:
    _check_args(args)
    loaded = _load(args)  # data errors (bad rows, non-UTF-8) surface before the model loads
    if not loaded.items:
        print(f"{loaded.source}: no items to predict")
        return 0
    out = Path(args.out)
    if not args.resume and out.exists():
        out.unlink()
    engine = build_engine(args, batch_size=args.batch_size)
    done = {r["id"] for r in finished_rows(out, engine.model_name)}
    todo = [it for it in loaded.items if it.id not in done]
    print(f"{loaded.source}: {len(loaded.items)} items ({loaded.dataset}); "
          f"{len(loaded.items) - len(todo)} already in {out}, {len(todo)} to predict")
    t0 = time.time()
    try:
        _predict(engine, todo, out, args)
    except KeyboardInterrupt:
        print(f"\ninterrupted: finished rows are saved in {out}; rerun the same command to continue")
        raise
    _summary(out, {it.id for it in loaded.items}, len(todo), time.time() - t0)
    return 0


def _predict(engine, items: list, out: Path, args: argparse.Namespace) -> None:
    from tqdm.auto import tqdm

    from ..utils.io import JsonlAppender

    with JsonlAppender(out) as sink, tqdm(total=len(items), unit="q", desc="predict", disable=args.no_progress) as bar:
        for start in range(0, len(items), args.batch_size):
            batch = items[start:start + args.batch_size]
            results = engine.answer_batch(batch, explain=args.explain, max_new_tokens=args.max_new_tokens)
            for res in results:
                sink.write(res.model_dump(mode="json"))
            bar.update(len(batch))


def _summary(out: Path, wanted: set[str], n_new: int, seconds: float) -> None:
    from ..utils.io import read_jsonl_complete

    rows = [r for r in read_jsonl_complete(out) if r["id"] in wanted]
    rate = f" ({n_new / seconds:.1f} items/s)" if n_new and seconds > 0 else ""
    print(f"predicted {n_new} items in {seconds:.1f}s{rate}; {len(rows)} rows for this input in {out}")
    labelled = [r for r in rows if r.get("correct") is not None]
    if labelled:
        acc = sum(r["correct"] for r in labelled) / len(labelled)
        print(f"accuracy {acc:.3f} over {len(labelled)} labelled items")
    abstained = sum(bool(r.get("abstained")) for r in rows)
    print(f"abstained on {abstained}/{len(rows)} items")
    print(f"wrote {out}")
