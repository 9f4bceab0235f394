"""Questions/second of medqa's one-pass scorer vs lm-evaluation-harness vs generate-and-parse.

    python benchmarks/eval_speed.py --n 300 --batch-size 8 --threads 1 --rounds 3 [--json out.json]
    python benchmarks/eval_speed.py --device cuda --dtype bf16 --rounds 1   # on a GPU (see gpu_check.sh)

Same items (MedMCQA dev, first N), same machine, same batch size and torch thread count; each method
in its own subprocess (its peak RSS is its own), model loading timed separately.  The items are cut
into ``--rounds`` blocks and the methods take turns on each block (in rotating order), so on a shared
machine whose load drifts every method sees about the same load.  Also prints the lm-eval agreement
of the lmeval-style prompt (see lmeval_agreement.py for the check alone).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import agreement, export, load_bench_items, merge_blocks, run_worker  # noqa: E402

LABELS = {"medqa": "medqa HFScorer (lmeval prompt)", "medqa-tmpl": "medqa HFScorer (project template)",
          "lmeval": "lm-evaluation-harness 0.4 (HF backend)", "generate": "generate-and-parse (8 greedy tokens)",
          "generate-sorted": "generate-and-parse, length-sorted batches"}


def table(results: dict) -> str:
    base = results.get("medqa")
    accel = any(r.get("peak_accel_mb") for r in results.values())
    head = "| method | q/s | CPU s / q | peak RSS (MB) |" + (" peak GPU mem (MB) |" if accel else "")
    lines = [head + " accuracy | medqa speed-up |", "|---" * (head.count("|") + 1) + "|"]
    for m, r in results.items():
        qps = r["n"] / r["wall_s"]
        up = f"{(base['n'] / base['wall_s']) / qps:.2f}×" if base and m != "medqa" else "–"
        gpu = f" {r.get('peak_accel_mb') or 0:.0f} |" if accel else ""
        lines.append(f"| {LABELS.get(m, m)} | {qps:.2f} | {r['cpu_s'] / r['n']:.3f} | {r['peak_rss_mb']:.0f} |{gpu}"
                     f" {100 * r['accuracy']:.1f}% | {up} |")
    return "\n".join(lines)


def run_rounds(items, methods: list[str], rounds: int, batch_size: int, threads: int, **where) -> dict:
    size = -(-len(items) // rounds)
    blocks = [items[i:i + size] for i in range(0, len(items), size)]
    parts: dict[str, list[dict]] = {m: [] for m in methods}
    with tempfile.TemporaryDirectory(prefix="medqa-bench-") as tmp:
        for r, block in enumerate(blocks):
            sub = Path(tmp) / f"round{r}"
            sub.mkdir()
            export(block, sub)
            for m in methods[r % len(methods):] + methods[:r % len(methods)]:  # rotate who goes first
                load = os.getloadavg()[0]
                res = run_worker(m, sub, batch_size, threads, **where)
                res["loadavg_before"] = load
                parts[m].append(res)
                print(f"round {r} {m}: {res['n'] / res['wall_s']:.2f} q/s ({res['n']} items), "
                      f"load avg {load:.1f}, RSS {res['peak_rss_mb']:.0f} MB", file=sys.stderr, flush=True)
    return {m: merge_blocks(parts[m]) for m in methods}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1, help="torch threads in every worker (0 = torch default)")
    ap.add_argument("--rounds", type=int, default=3, help="item blocks the methods take turns on")
    ap.add_argument("--methods", default="medqa,lmeval,generate,generate-sorted,medqa-tmpl")
    ap.add_argument("--json", help="write all results here")
    ap.add_argument("--model", default="embedded", help="the same base model for every method")
    ap.add_argument("--device", default="cpu", help="cpu, cuda, ... (the same for every method)")
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16", "fp16"])
    a = ap.parse_args()
    items = load_bench_items(a.n)
    results = run_rounds(items, a.methods.split(","), max(1, a.rounds), a.batch_size, a.threads,
                         model=a.model, device=a.device, dtype=a.dtype)
    print(f"\n{len(items)} MedMCQA dev items, batch size {a.batch_size}, torch threads {a.threads}, {a.dtype}, "
          f"{a.device}, model {a.model}, {a.rounds} rounds\n")
    print(table(results))
    if "medqa" in results and "lmeval" in results:
        ag = agreement(results["medqa"], results["lmeval"])
        print(f"\nlm-eval agreement (lmeval prompt): same prediction on {100 * ag['same_prediction']:.1f}% of "
              f"{ag['n']} items, accuracy gap {ag['accuracy_gap_points']:+.2f} points, "
              f"max |Δp| {ag['max_abs_prob_diff']:.2e}; lm-eval's own acc {results['lmeval']['lmeval_acc']:.4f}")
        results["agreement"] = ag
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
