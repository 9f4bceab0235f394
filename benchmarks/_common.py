"""Shared pieces of the evaluation benchmarks: the item set, one worker per method, agreement.

Every method runs in its own subprocess (``python benchmarks/_common.py --worker METHOD ...``) so its
peak RSS is its own, with the same torch thread count, and only the scoring loop is timed (model
loading is reported separately).  Methods:

* ``medqa``      — :class:`medqa.scoring.hf.HFScorer`, lm-eval-style prompt (the agreement check)
* ``medqa-tmpl`` — the same scorer on the project template
* ``lmeval``     — lm-evaluation-harness ``simple_evaluate``, HF backend, a temporary local task
                   (``output_type: multiple_choice``) over the same prompts
* ``generate``   — the seed's method: greedy ``generate(max_new_tokens=8)``, left padding, first A-D,
                   batches in dataset order (``generate-sorted``: batches of similar length)

``--model/--device/--dtype`` are passed to every worker alike (default: the embedded model, fp32, CPU).  On
an accelerator each worker first runs one untimed forward pass (CUDA context, cuBLAS handles, kernel
choice), so no method pays the one-off start-up inside its timing; peak accelerator memory is reported too.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DATA = REPO.parent / "shared" / "data" / "medmcqa" / "dev_public.jsonl"
TASK = "medqa_bench_medmcqa"


def load_bench_items(n: int):
    """The first ``n`` MedMCQA dev items (cop is 1-based in this file)."""
    from medqa.data import load_items

    return load_items(DATA, "medmcqa", limit=n, cop_base=1).items


def export(items, tmp: Path) -> None:
    """Items for the workers, plus the lm-eval docs and task YAML (exact lmeval-style prompts)."""
    from medqa.prompts import render_prompt

    with open(tmp / "items.jsonl", "w", encoding="utf-8") as f:
        for it in items:
            f.write(json.dumps(it.to_dict(), ensure_ascii=False) + "\n")
    with open(tmp / "docs.jsonl", "w", encoding="utf-8") as f:
        for i, it in enumerate(items):
            # doc_to_text/choice/target name *columns*, so lm-eval uses the strings verbatim (no Jinja):
            # context "...Answer:" + target_delimiter " " + "A" == our prompt + " A".
            f.write(json.dumps({"idx": i, "prompt": render_prompt(it, "lmeval"), "choices": list(it.letters),
                                "answer": it.answer}, ensure_ascii=False) + "\n")
    (tmp / f"{TASK}.yaml").write_text(
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tmp / 'docs.jsonl'}\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: prompt\ndoc_to_choice: choices\n"
        'doc_to_target: answer\ntarget_delimiter: " "\nmetric_list:\n  - metric: acc\n', encoding="utf-8")


def _timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


TORCH_DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def warm_up(model, device: str) -> None:
    """One untimed forward pass (batch 8 x 128 tokens) on an accelerator; nothing to do on CPU."""
    if device == "cpu":
        return
    import torch

    with torch.inference_mode():
        model(input_ids=torch.ones(8, 128, dtype=torch.long, device=model.device))
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def worker_medqa(items, style: str, a) -> dict:
    import math

    from medqa.modeling import load_model
    from medqa.scoring.hf import HFScorer

    batch_size = a.batch_size
    bundle, load_s, _ = _timed(lambda: load_model(a.model, device=a.device, dtype=a.dtype))
    warm_up(bundle.model, a.device)
    scorer = HFScorer(bundle.model, bundle.tokenizer, style=style, batch_size=batch_size)
    rows, wall, cpu = _timed(lambda: scorer.score(items))
    probs = [[math.exp(x) for x in r] for r in rows]
    return {"load_s": load_s, "wall_s": wall, "cpu_s": cpu, "probs": probs,
            "preds": [max(range(len(p)), key=p.__getitem__) for p in probs]}


def worker_lmeval(items, tmp: Path, a) -> dict:
    import math

    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from medqa.modeling import resolve_model_path

    batch_size, path = a.batch_size, resolve_model_path(a.model)
    lm, load_s, _ = _timed(lambda: HFLM(pretrained=path, dtype=TORCH_DTYPES[a.dtype], batch_size=batch_size,
                                        device=a.device))
    warm_up(lm.model, a.device)
    inner = {"wall": 0.0, "cpu": 0.0}
    orig = lm.loglikelihood

    def timed_loglikelihood(*a, **kw):  # the scoring itself, without task building/metrics
        out, w, c = _timed(lambda: orig(*a, **kw))
        inner["wall"] += w
        inner["cpu"] += c
        return out

    lm.loglikelihood = timed_loglikelihood
    res, wall, cpu = _timed(lambda: simple_evaluate(model=lm, tasks=[TASK], batch_size=batch_size, log_samples=True,
                                                    task_manager=TaskManager(include_path=str(tmp))))
    preds, probs = [None] * len(items), [None] * len(items)
    for s in res["samples"][TASK]:
        ll = [r[0] if isinstance(r, (list, tuple)) else r for r in s["filtered_resps"]]
        m = max(ll)
        z = sum(math.exp(x - m) for x in ll)
        probs[s["doc_id"]] = [math.exp(x - m) / z for x in ll]
        preds[s["doc_id"]] = max(range(len(ll)), key=ll.__getitem__)
    return {"load_s": load_s, "wall_s": inner["wall"], "cpu_s": inner["cpu"], "end_to_end_s": wall,
            "probs": probs, "preds": preds, "lmeval_acc": res["results"][TASK].get("acc,none")}


def worker_generate(items, a, sort: bool = False) -> dict:
    import torch

    from medqa.modeling import load_model
    from medqa.prompts import render_prompt

    batch_size = a.batch_size
    bundle, load_s, _ = _timed(lambda: load_model(a.model, device=a.device, dtype=a.dtype))
    warm_up(bundle.model, a.device)
    model, tok = bundle.model, bundle.tokenizer
    tok.padding_side = "left"  # generation continues from the last column, so pad on the left
    order = list(range(len(items)))  # the seed's method: dataset order
    if sort:  # variant: similar lengths per batch, to show what padding alone costs
        order.sort(key=lambda i: len(render_prompt(items[i])))
    preds = [-1] * len(items)

    def run():
        with torch.inference_mode():
            for s in range(0, len(order), batch_size):
                idx = order[s:s + batch_size]
                enc = tok([render_prompt(items[i]) for i in idx], return_tensors="pt", padding=True).to(model.device)
                out = model.generate(**enc, max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id)
                for i, text in zip(idx, tok.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)):
                    letter = next((ch for ch in text if ch in "ABCD"), None)
                    preds[i] = -1 if letter is None else "ABCD".index(letter)

    _, wall, cpu = _timed(run)
    return {"load_s": load_s, "wall_s": wall, "cpu_s": cpu, "preds": preds, "unparsed": preds.count(-1)}


def worker_main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="fp32", choices=sorted(TORCH_DTYPES))
    a = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import torch

    from medqa.records import MCQItem
    from medqa.training.run_info import peak_gpu_mb, peak_rss_mb

    if a.threads:
        torch.set_num_threads(a.threads)
    tmp = Path(a.tmp)
    items = [MCQItem.from_dict(json.loads(x)) for x in (tmp / "items.jsonl").read_text(encoding="utf-8").splitlines()]
    if a.worker == "medqa":
        out = worker_medqa(items, "lmeval", a)
    elif a.worker == "medqa-tmpl":
        out = worker_medqa(items, "medqa", a)
    elif a.worker == "lmeval":
        out = worker_lmeval(items, tmp, a)
    elif a.worker in ("generate", "generate-sorted"):
        out = worker_generate(items, a, sort=a.worker == "generate-sorted")
    else:
        raise SystemExit(f"unknown worker {a.worker}")
    gold = [it.answer for it in items]
    out.update(method=a.worker, n=len(items), threads=torch.get_num_threads(), batch_size=a.batch_size,
               peak_rss_mb=peak_rss_mb(), peak_accel_mb=peak_gpu_mb(), accuracy=sum(p == g for p, g in zip(out["preds"], gold)) / len(items))
    (tmp / f"{a.worker}.json").write_text(json.dumps(out), encoding="utf-8")


def run_worker(method: str, tmp: Path, batch_size: int, threads: int, model: str = "embedded", device: str = "cpu",
               dtype: str = "fp32") -> dict:
    """Run one method in a fresh process and return its result dict."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", method, "--tmp", str(tmp),
           "--batch-size", str(batch_size), "--threads", str(threads), "--model", model, "--device", device,
           "--dtype", dtype]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"worker {method} failed:\n{proc.stderr[-4000:]}")
    res = json.loads((tmp / f"{method}.json").read_text(encoding="utf-8"))
    res["process_s"] = time.time() - t0
    return res


def merge_blocks(parts: list[dict]) -> dict:
    """Combine one method's results over item blocks (rounds): times add up, RSS is the max."""
    out = dict(parts[0])
    n = sum(p["n"] for p in parts)
    out.update(n=n, wall_s=sum(p["wall_s"] for p in parts), cpu_s=sum(p["cpu_s"] for p in parts),
               load_s=sum(p["load_s"] for p in parts) / len(parts), peak_rss_mb=max(p["peak_rss_mb"] for p in parts),
               peak_accel_mb=max((p.get("peak_accel_mb") or 0 for p in parts), default=0) or None,
               preds=[x for p in parts for x in p["preds"]], accuracy=sum(p["accuracy"] * p["n"] for p in parts) / n,
               loadavg=[p.get("loadavg_before") for p in parts], rounds=len(parts))
    if parts[0].get("probs") is not None:
        out["probs"] = [x for p in parts for x in p["probs"]]
    if "lmeval_acc" in parts[0]:
        out["lmeval_acc"] = sum(p["lmeval_acc"] * p["n"] for p in parts) / n
        out["end_to_end_s"] = sum(p["end_to_end_s"] for p in parts)
    return out


def agreement(a: dict, b: dict) -> dict:
    """Same-prediction rate, accuracy gap and largest probability difference between two methods."""
    same = sum(x == y for x, y in zip(a["preds"], b["preds"]))
    diff = max((abs(p - q) for ra, rb in zip(a.get("probs") or [], b.get("probs") or []) for p, q in zip(ra, rb)),
               default=None)
    return {"n": len(a["preds"]), "same_prediction": same / len(a["preds"]),
            "accuracy_gap_points": 100 * (a["accuracy"] - b["accuracy"]), "max_abs_prob_diff": diff,
            "disagreeing_items": [i for i, (x, y) in enumerate(zip(a["preds"], b["preds"])) if x != y]}


if __name__ == "__main__":
    worker_main()
