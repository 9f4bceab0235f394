"""Does medqa's lmeval-style scoring reproduce lm-evaluation-harness item by item?

    python benchmarks/lmeval_agreement.py --n 300 [--threads 2]

Scores the first N MedMCQA dev items with the real embedded Gemma 270M twice — medqa ``HFScorer``
(``--prompt-style lmeval``) and ``lm_eval.simple_evaluate`` (HF backend) on a temporary local
``multiple_choice`` task over the same prompts — and checks: same prediction on >= 99% of items and
the same accuracy within 0.5 points.  Exit status 1 if either check fails.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import agreement, export, load_bench_items, run_worker  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    items = load_bench_items(a.n)
    with tempfile.TemporaryDirectory(prefix="medqa-agree-") as tmp:
        export(items, Path(tmp))
        ours = run_worker("medqa", Path(tmp), a.batch_size, a.threads)
        ref = run_worker("lmeval", Path(tmp), a.batch_size, a.threads)
    ag = agreement(ours, ref)
    ok = ag["same_prediction"] >= 0.99 and abs(ag["accuracy_gap_points"]) <= 0.5
    print(f"{ag['n']} items: same prediction {100 * ag['same_prediction']:.2f}% (need >= 99%), "
          f"accuracy medqa {100 * ours['accuracy']:.2f}% vs lm-eval {100 * ref['accuracy']:.2f}% "
          f"(lm-eval reports {100 * ref['lmeval_acc']:.2f}%), gap {ag['accuracy_gap_points']:+.2f} points (need <= 0.5), "
          f"max |Δp| {ag['max_abs_prob_diff']:.2e}")
    if ag["disagreeing_items"]:
        print("disagreeing item indices:", ag["disagreeing_items"])
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
