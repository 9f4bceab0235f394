"""Does retrieval help?  Accuracy with and without RAG on MedMCQA and PubMedQA, paired tests, retrieval cost.

    python benchmarks/rag_effect.py --out runs/rag_effect [--medmcqa-n 300] [--pubmedqa-n 200] [-k 3]

* MedMCQA: corpus = the explanations of ``medmcqa/train_cardio_subset.jsonl`` (MedMCQA *train* rows; no id or
  question overlap with dev), evaluated on the first N items of ``medmcqa/dev_public.jsonl``: no evidence vs
  the top-k hybrid passages in the prompt's evidence block.
* PubMedQA: corpus = the abstracts (CONTEXTS) of all 500 items of ``pubmedqa/trainval.jsonl`` (the task
  defines each question's own abstract as its evidence), evaluated on the first N items: no context, the
  item's own abstract, and the top-k passages retrieved from all 500 abstracts.
* The leakage guard runs on every evaluated set (question text against the index) and leaked items are
  dropped from the comparisons (``--keep-leaked`` keeps them).  A PubMedQA question matching *its own*
  abstract is allowed (the task defines that abstract as its evidence) and only counted.
* Paired comparisons (McNemar exact + paired bootstrap of the accuracy difference) on the same items;
  accuracy with a bootstrap 95% CI; retrieval latency per query (p50/p95, one query at a time as the answer
  engine calls it) and index build time.

Scores are cached per condition in ``OUT/scores/*.jsonl`` so an interrupted run resumes; ``OUT/config.json``
guards that the cache belongs to the same settings.  Prints a Markdown report and writes ``OUT/results.json``.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

log = logging.getLogger("rag_effect")


def data_dir(arg: str | None) -> Path:
    from medqa.data import find_data_dir

    d = Path(arg) if arg else find_data_dir()
    if d is None or not (d / "PROVENANCE.md").is_file():
        raise SystemExit("benchmark data not found: pass --data ../shared/data")
    return d


def build_or_load(name: str, sources: list[Path], out: Path, a) -> tuple[object, dict]:
    """The index for one corpus (rebuilt unless --reuse-index finds it), with its build statistics."""
    from medqa.rag.store import LocalIndex, build_index

    path = out / "indexes" / name
    if a.reuse_index and (path / "manifest.json").exists():
        t0 = time.perf_counter()
        index = LocalIndex.load(path)
        index.embedder  # load the query model now, not inside the first timed query
        stats = json.loads((out / "indexes" / f"{name}.build.json").read_text())
        stats["reused"] = True
        stats["load_s"] = time.perf_counter() - t0
        return index, stats
    index, st = build_index(sources, path, chunk_words=a.chunk_words, overlap=a.overlap, embed_model=a.embed_model,
                            overwrite=True)
    t0 = time.perf_counter()
    index = LocalIndex.load(path)
    index.embedder
    stats = {"documents": index.manifest["counts"]["documents"], "chunks": len(index), "seconds": st.seconds,
             "load_s": time.perf_counter() - t0}
    (out / "indexes" / f"{name}.build.json").write_text(json.dumps(stats, indent=2))
    return index, stats


def latency(index, queries: list[str], k: int, n: int, threads: int) -> dict:
    """Per-query wall time (ms) for each mode, one query per call; the first query of each mode is a warm-up.

    Runs with ``threads`` torch intra-op threads (a one-query MiniLM forward gains nothing from more, and on a
    busy machine extra threads mostly wait), restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return _latency(index, queries, k, n) | {"torch_threads": threads}
    finally:
        torch.set_num_threads(before)


def _latency(index, queries: list[str], k: int, n: int) -> dict:
    out = {}
    for mode in ("bm25", "dense", "hybrid"):
        index.search(queries[0], k, mode=mode)
        times = []
        for q in queries[:n]:
            t0 = time.perf_counter()
            index.search(q, k, mode=mode)
            times.append(1000 * (time.perf_counter() - t0))
        times.sort()
        out[mode] = {"n": len(times), "p50_ms": statistics.median(times),
                     "p95_ms": times[min(len(times) - 1, math.ceil(0.95 * len(times)) - 1)],
                     "mean_ms": statistics.fmean(times)}
    return out


class CachedScorer:
    """Scores items per condition, appending each finished batch to OUT/scores/<condition>.jsonl (resumable)."""

    def __init__(self, scorer, out: Path, chunk: int = 32):
        self.scorer, self.dir, self.chunk = scorer, out / "scores", chunk
        self.dir.mkdir(parents=True, exist_ok=True)
        self.seconds: dict[str, float] = {}

    def __call__(self, condition: str, items, evidence=None) -> dict[str, list[float]]:
        from medqa.utils.io import JsonlAppender, read_jsonl_complete

        path = self.dir / f"{condition}.jsonl"
        done = {r["id"]: r["logp"] for r in read_jsonl_complete(path)}
        todo = [i for i, it in enumerate(items) if it.id not in done]
        t0 = time.perf_counter()
        with JsonlAppender(path) as f:
            for s in range(0, len(todo), self.chunk):
                idx = todo[s:s + self.chunk]
                rows = self.scorer.score([items[i] for i in idx], None if evidence is None else [evidence[i] for i in idx])
                for i, row in zip(idx, rows):
                    f.write({"id": items[i].id, "logp": row})
                    done[items[i].id] = row
                log.info("%s: %d/%d scored", condition, len(done), len(items))
        if todo:
            self.seconds[condition] = time.perf_counter() - t0
        return {it.id: done[it.id] for it in items}


def correctness(items, rows: dict) -> list[bool]:
    return [max(range(len(rows[it.id])), key=rows[it.id].__getitem__) == it.answer for it in items]


def summarize(items, conds: dict[str, dict], pairs: list[tuple[str, str]]) -> dict:
    """Accuracy (+CI) and prediction spread per condition; per pair McNemar + paired bootstrap on correctness,
    and a more sensitive paired test on the gold answer's log-probability (does evidence move probability
    towards the right answer even when the arg-max does not change?)."""
    import numpy as np
    from scipy import stats

    from medqa.evaluation.metrics import accuracy, bootstrap_ci, paired_bootstrap, paired_comparison

    ids = [it.id for it in items]
    corr = {c: correctness(items, rows) for c, rows in conds.items()}
    gold_lp = {c: np.array([rows[it.id][it.answer] for it in items]) for c, rows in conds.items()}
    acc = {}
    for c, v in corr.items():
        preds = [max(range(len(conds[c][it.id])), key=conds[c][it.id].__getitem__) for it in items]
        top = max(set(preds), key=preds.count)
        acc[c] = {"accuracy": accuracy(v), "ci95": list(bootstrap_ci(v)), "n": len(v),
                  "most_predicted": "ABCDE"[top], "most_predicted_share": preds.count(top) / len(preds),
                  "mean_p_gold": float(np.mean(np.exp(gold_lp[c])))}
    paired = {}
    for a_, b_ in pairs:
        p = paired_comparison(ids, corr[a_], corr[b_])
        p.pop("flipped_to_correct"), p.pop("flipped_to_wrong")
        p["fixed"], p["broken"] = p["mcnemar"]["only_b"], p["mcnemar"]["only_a"]
        d = gold_lp[b_] - gold_lp[a_]
        boot = paired_bootstrap(np.zeros_like(d), d)  # bootstrap of mean(d)
        p["gold_logprob"] = {"mean_diff": float(d.mean()), "ci95": boot["ci95"],
                             "wilcoxon_p": float(stats.wilcoxon(d).pvalue) if np.any(d != 0) else 1.0}
        paired[f"{b_} vs {a_}"] = p
    return {"accuracy": acc, "paired": paired}


def evidence_for(index, items, k: int, mode: str) -> tuple[list[str], list[list[str]]]:
    from medqa.rag import evidence_block, query_for_item

    hits = index.search_many([query_for_item(it) for it in items], k, mode=mode)
    return [evidence_block(h) for h in hits], [[p.id for p in h] for h in hits]


def leakage(index, items, name: str) -> tuple[dict, set]:
    """The guard on the evaluated questions; a match to an item's *own* task context (PubMedQA abstract) is allowed."""
    from medqa.rag import check_leakage, own_context_docs

    t0 = time.perf_counter()
    rep = check_leakage(index, items, allowed=own_context_docs(items))
    log.info("%s: %s", name, rep.summary())
    d = rep.to_dict()
    d["seconds"] = time.perf_counter() - t0
    d["matches"], d["expected"] = d["matches"][:10], d["expected"][:10]
    return d, rep.leaked_ids


def run_medmcqa(a, data: Path, out: Path, score) -> dict:
    from medqa.data import load_items

    index, build = build_or_load("medmcqa_train_exp", [data / "medmcqa" / "train_cardio_subset.jsonl"], out, a)
    dev = load_items(data / "medmcqa" / "dev_public.jsonl", "medmcqa", cop_base=1)
    full_leak, _ = leakage(index, dev.items, "medmcqa dev_public (all)")
    items = dev.items[: a.medmcqa_n]
    leak, leaked = leakage(index, items, "medmcqa eval subset")
    if leaked and not a.keep_leaked:
        items = [it for it in items if it.id not in leaked]
    evidence, hit_ids = evidence_for(index, items, a.k, a.mode)
    from medqa.rag import query_for_item

    lat = latency(index, [query_for_item(it) for it in items], a.k, a.latency_n, a.latency_threads)
    conds = {"medmcqa_none": score("medmcqa_none", items),
             f"medmcqa_rag_{a.mode}": score(f"medmcqa_rag_{a.mode}_k{a.k}", items, evidence)}
    res = summarize(items, conds, [("medmcqa_none", f"medmcqa_rag_{a.mode}")])
    ev_tokens = [len(e.split()) for e in evidence]
    res.update(index=build, leakage_eval_subset=leak, leakage_dev_public_all=full_leak, latency=lat,
               n_eval=len(items), evidence_words_mean=statistics.fmean(ev_tokens),
               example_retrieval={"question": items[0].question, "passages": hit_ids[0]})
    return res


def own_abstract_recall(index, items, k: int) -> dict:
    """Retrieval quality with a known answer: how often each mode ranks the question's own abstract first / in
    the top k, over all trainval questions (the only relevance labels available here)."""
    from medqa.rag import query_for_item

    out = {}
    for mode in ("bm25", "dense", "hybrid"):
        hits = index.search_many([query_for_item(it) for it in items], k, mode=mode)
        own = [[p.id.rsplit("#", 1)[0] == f"pubmedqa:{it.id}" for p in h] for it, h in zip(items, hits)]
        out[mode] = {"n": len(items), "recall@1": sum(bool(o) and o[0] for o in own) / len(items),
                     f"recall@{k}": sum(any(o) for o in own) / len(items)}
    return out


def run_pubmedqa(a, data: Path, out: Path, score) -> dict:
    from dataclasses import replace

    from medqa.data import load_items
    from medqa.rag import query_for_item

    src = data / "pubmedqa" / "trainval.jsonl"
    index, build = build_or_load("pubmedqa_contexts", [src], out, a)
    items = load_items(src, "pubmedqa").items[: a.pubmedqa_n]
    leak, leaked = leakage(index, items, "pubmedqa eval subset")
    if leaked and not a.keep_leaked:
        items = [it for it in items if it.id not in leaked]
    bare = [replace(it, context="") for it in items]
    evidence, hit_ids = evidence_for(index, bare, a.k, a.mode)
    own_hit = [any(h.split("#")[0] == f"pubmedqa:{it.id}" for h in hs) for it, hs in zip(items, hit_ids)]
    own_top1 = [bool(hs) and hs[0].split("#")[0] == f"pubmedqa:{it.id}" for it, hs in zip(items, hit_ids)]
    lat = latency(index, [query_for_item(it) for it in items], a.k, a.latency_n, a.latency_threads)
    recall = own_abstract_recall(index, load_items(src, "pubmedqa").items, a.k)
    rag = f"pubmedqa_rag_{a.mode}"
    conds = {"pubmedqa_none": score("pubmedqa_none", bare),
             "pubmedqa_own_context": score("pubmedqa_own_context", items),
             rag: score(f"{rag}_k{a.k}", bare, evidence)}
    res = summarize(items, conds, [("pubmedqa_none", "pubmedqa_own_context"), ("pubmedqa_none", rag),
                                   ("pubmedqa_own_context", rag)])
    res.update(index=build, leakage_eval_subset=leak, latency=lat, n_eval=len(items), recall_by_mode=recall,
               own_abstract_in_top_k=sum(own_hit) / len(items), own_abstract_top1=sum(own_top1) / len(items),
               evidence_words_mean=statistics.fmean(len(e.split()) for e in evidence))
    return res


def markdown(results: dict) -> str:
    cfg = results["config"]
    lines = [f"k = {cfg['k']} passages ({cfg['mode']}), chunks of {cfg['chunk_words']} words / {cfg['overlap']} overlap, "
             f"embedder {cfg['embed_model']}, scorer {cfg['model']} ({cfg['style']} template).", ""]
    lines += ["| set | condition | n | accuracy | 95% CI | most predicted letter (share) | mean p(gold) |",
              "|---|---|---|---|---|---|---|"]
    for ds in ("medmcqa", "pubmedqa"):
        if ds not in results:
            continue
        for c, v in results[ds]["accuracy"].items():
            lines.append(f"| {ds} | {c.split('_', 1)[1]} | {v['n']} | {100 * v['accuracy']:.1f}% | "
                         f"{100 * v['ci95'][0]:.1f}–{100 * v['ci95'][1]:.1f} | {v['most_predicted']} "
                         f"({100 * v['most_predicted_share']:.1f}%) | {v['mean_p_gold']:.4f} |")
    lines += ["", "| comparison | Δ accuracy (points) | paired 95% CI | fixed / broken | McNemar p (exact) "
                  "| Δ log p(gold) (95% CI) | Wilcoxon p |", "|---|---|---|---|---|---|---|"]
    for ds in ("medmcqa", "pubmedqa"):
        for name, p in results.get(ds, {}).get("paired", {}).items():
            b, g = p["bootstrap"], p["gold_logprob"]
            lines.append(f"| {name} | {100 * b['diff']:+.1f} | {100 * b['ci95'][0]:+.1f} … {100 * b['ci95'][1]:+.1f} | "
                         f"{p['fixed']} / {p['broken']} | {p['mcnemar']['p_exact']:.3f} | {g['mean_diff']:+.4f} "
                         f"({g['ci95'][0]:+.4f} … {g['ci95'][1]:+.4f}) | {g['wilcoxon_p']:.2g} |")
    threads = next((results[d]["latency"]["torch_threads"] for d in ("medmcqa", "pubmedqa") if d in results), "?")
    lines += ["", f"Retrieval latency per query (ms, p50 / p95, one query per call, {threads} torch thread(s), "
                  "query embedding included):", "",
              "| index | documents | chunks | build s (embed) | load s | leakage (eval subset) | "
              "bm25 | dense | hybrid |", "|---|---|---|---|---|---|---|---|---|"]
    for ds in ("medmcqa", "pubmedqa"):
        if ds not in results:
            continue
        r = results[ds]
        ix, lat, lk = r["index"], r["latency"], r["leakage_eval_subset"]["counts"]
        sec = ix["seconds"]
        lines.append(
            f"| {ds} | {ix['documents']} | {ix['chunks']} | {sec['total']:.0f} ({sec.get('embed', 0):.0f}) | "
            f"{ix['load_s']:.1f} | {lk['leaked']} of {lk['items']} ({lk['exact']} exact) | "
            + " | ".join(f"{lat[m]['p50_ms']:.1f} / {lat[m]['p95_ms']:.1f}" for m in ("bm25", "dense", "hybrid")) + " |")
    if "pubmedqa" in results:
        r = results["pubmedqa"]
        lk = r["leakage_eval_subset"]["counts"]
        rec, kk = r["recall_by_mode"], cfg["k"]
        parts = [f"{m} recall@1 {100 * rec[m]['recall@1']:.1f}%, recall@{kk} {100 * rec[m][f'recall@{kk}']:.1f}%"
                 for m in ("bm25", "dense", "hybrid")]
        lines += ["", f"PubMedQA retrieval quality (own abstract as the relevant document, all {rec['hybrid']['n']} "
                      f"trainval questions): " + "; ".join(parts) + "."]
        lines += ["", f"PubMedQA retrieval: the item's own abstract is among the top {cfg['k']} passages for "
                      f"{100 * r['own_abstract_in_top_k']:.1f}% of questions (top 1: {100 * r['own_abstract_top1']:.1f}%). "
                      f"Leakage guard: {lk['leaked']} questions found in other abstracts; "
                      f"{lk['expected_own_evidence']} match only their own abstract (allowed, task-defined evidence)."]
    if "medmcqa" in results:
        lk = results["medmcqa"]["leakage_dev_public_all"]["counts"]
        lines += [f"MedMCQA leakage guard over all of dev_public ({lk['items']} questions): {lk['leaked']} flagged "
                  f"({lk['exact']} exact, {lk['ngram']} n-gram, {lk['embedding']} embedding)."]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/rag_effect")
    ap.add_argument("--data", help="benchmark data folder (default: ../shared/data)")
    ap.add_argument("--medmcqa-n", type=int, default=300, help="first N of dev_public (0 = skip)")
    ap.add_argument("--pubmedqa-n", type=int, default=200, help="first N of trainval (0 = skip)")
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--mode", default="hybrid", choices=("hybrid", "dense", "bm25"))
    ap.add_argument("--chunk-words", type=int, default=120)
    ap.add_argument("--overlap", type=int, default=30)
    ap.add_argument("--embed-model", default="embedded")
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--style", default="medqa")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--latency-n", type=int, default=200)
    ap.add_argument("--latency-threads", type=int, default=1, help="torch threads while timing retrieval")
    ap.add_argument("--reuse-index", action="store_true", help="reuse OUT/indexes/* if present")
    ap.add_argument("--keep-leaked", action="store_true", help="keep items the leakage guard flags")
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = {k: getattr(a, k) for k in ("k", "mode", "chunk_words", "overlap", "embed_model", "model", "style")}
    cfg_path = out / "config.json"
    if cfg_path.exists() and json.loads(cfg_path.read_text()) != cfg:
        raise SystemExit(f"{out} holds scores for other settings ({cfg_path}); use another --out")
    cfg_path.write_text(json.dumps(cfg, indent=2))
    data = data_dir(a.data)

    import torch

    from medqa.modeling import load_model
    from medqa.scoring.hf import HFScorer

    t0 = time.perf_counter()
    bundle = load_model(a.model, device="cpu")
    scorer = HFScorer(bundle.model, bundle.tokenizer, style=a.style, batch_size=a.batch_size)
    score = CachedScorer(scorer, out)
    results = {"config": cfg, "model_load_s": time.perf_counter() - t0,
               "machine": {"cpu": platform.processor() or platform.machine(), "torch_threads": torch.get_num_threads(),
                           "loadavg_start": os.getloadavg()}}
    if a.medmcqa_n:
        results["medmcqa"] = run_medmcqa(a, data, out, score)
    if a.pubmedqa_n:
        results["pubmedqa"] = run_pubmedqa(a, data, out, score)
    results["scoring_seconds"] = score.seconds
    results["machine"]["loadavg_end"] = os.getloadavg()
    results["truncated_prompts"] = scorer.truncated
    (out / "results.json").write_text(json.dumps(results, indent=2))
    md = markdown(results)
    (out / "results.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
