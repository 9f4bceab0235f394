"""Latency of `medqa ask` on real MedMCQA dev items with the embedded Gemma 3 270M (issue: < 30 s each).

Runs the real CLI entry point in-process (model load included, as a user experiences it) and prints a table
with wall and CPU seconds per question and the 1-minute load average, so a busy machine is visible.

    python benchmarks/ask_latency.py --n 3 [--max-new-tokens 96]
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import time
from contextlib import redirect_stdout
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--data", default=str(ROOT.parent / "shared" / "data" / "medmcqa" / "dev_public.jsonl"))
    args = ap.parse_args()
    from medqa.cli import main as cli
    from medqa.data import load_items

    rows = []
    for item in load_items(args.data, limit=args.n).items:
        argv = ["ask", item.question, *[a for o in item.options for a in ("--option", o)],
                "--max-new-tokens", str(args.max_new_tokens)]
        buf = io.StringIO()
        w0, c0 = time.perf_counter(), time.process_time()
        with redirect_stdout(buf):
            rc = cli(argv)
        rows.append((item.id, rc, time.perf_counter() - w0, time.process_time() - c0, os.getloadavg()[0],
                     buf.getvalue().splitlines()[0] if buf.getvalue() else ""))
    print("| item | rc | wall s | CPU s | load avg | first line |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r[0][:12]} | {r[1]} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.1f} | {r[5][:50]} |")
    worst = max(r[2] for r in rows)
    print(f"\nworst wall time {worst:.1f} s (target < 30 s): {'MET' if worst < 30 else 'MISSED'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
