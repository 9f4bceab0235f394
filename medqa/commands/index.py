"""Build, extend, query and audit a retrieval index for RAG (``--rag INDEX`` on ask/predict/eval/serve)."""
from __future__ import annotations

import argparse

DEFAULT_K = 5


def configure(parser: argparse.ArgumentParser) -> None:
    """``medqa index build|add|query|check-leakage|info|push`` (argparse only; heavy imports in :func:`run`)."""
    sub = parser.add_subparsers(dest="index_command", metavar="ACTION")

    def corpus_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("sources", nargs="+", metavar="SOURCE",
                       help=".md/.txt files or folders, .jsonl/.json/.csv text records, PubMedQA files (contexts) "
                            "or MCQ training files (explanations)")
        p.add_argument("--kind", default="auto", choices=("auto", "text", "records", "contexts", "explanations"),
                       help="how to read record files (default: auto per file)")
        p.add_argument("--batch-size", type=int, default=64, help="embedding batch size (default 64)")
        p.add_argument("--device", help="embedding device: cpu, cuda, mps (default cpu)")
        p.add_argument("--json", action="store_true", help="print statistics as JSON")

    p = sub.add_parser("build", help="build a new index from corpus sources")
    corpus_args(p)
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="index folder to create")
    p.add_argument("--chunk-words", type=int, default=120, help="words per chunk (default 120)")
    p.add_argument("--overlap", type=int, default=30, help="words shared by consecutive chunks (default 30)")
    p.add_argument("--embed-model", default="embedded", metavar="PATH|ID|embedded",
                   help="sentence-transformers model (default: embedded all-MiniLM-L6-v2, offline)")
    p.add_argument("--force", action="store_true", help="replace an existing index folder")

    p = sub.add_parser("add", help="add or update documents in an existing index (same model and chunking)")
    p.add_argument("index", metavar="DIR", help="index folder")
    corpus_args(p)
    p.add_argument("--embed-model", metavar="PATH|ID|embedded",
                   help="checked against the index's model (default: the index's own)")

    p = sub.add_parser("query", help="show the top passages for a query")
    p.add_argument("index", metavar="DIR|URL", help="index folder or qdrant:// address")
    p.add_argument("text", help="query text")
    p.add_argument("-k", type=int, default=DEFAULT_K, help=f"passages to return (default {DEFAULT_K})")
    p.add_argument("--mode", default="hybrid", choices=("hybrid", "dense", "bm25"), help="retrieval mode")
    p.add_argument("--embed-model", metavar="PATH|ID|embedded", help="query model (must match the index's)")
    p.add_argument("--device", help="embedding device")
    p.add_argument("--json", action="store_true", help="print passages as JSON")

    p = sub.add_parser("check-leakage", help="does the index contain evaluated questions? (exit 1 if so)")
    p.add_argument("index", metavar="DIR|URL", help="index folder or qdrant:// address")
    p.add_argument("eval_file", metavar="EVAL", help="evaluation data file or task name")
    p.add_argument("--dataset", metavar="NAME", help="dataset adapter for EVAL (default: detect)")
    p.add_argument("--split", help="for a task name: eval (default) or train")
    p.add_argument("--limit", type=int, help="check at most this many items")
    p.add_argument("--fields", default="question",
                   help="comma-separated item fields to look for: question, question+options, explanation, context")
    p.add_argument("--ngram", type=int, default=5, help="word n-gram length (default 5)")
    p.add_argument("--ngram-threshold", type=float, default=0.5,
                   help="share of the question's n-grams found in one document that counts as a near-duplicate")
    p.add_argument("--cosine", type=float, default=0.9, help="embedding cosine that counts as a near-duplicate")
    p.add_argument("--no-embedding", action="store_true", help="skip the embedding detector (no model load)")
    p.add_argument("--count-own-context", action="store_true",
                   help="also count matches to an item's own task-defined context (PubMedQA abstract) as leaks")
    p.add_argument("--device", help="embedding device")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")

    p = sub.add_parser("info", help="print an index's manifest")
    p.add_argument("index", metavar="DIR")

    p = sub.add_parser("push", help="upload a local index to a Qdrant collection")
    p.add_argument("index", metavar="DIR")
    p.add_argument("url", metavar="URL", help="qdrant://HOST:PORT/COLLECTION or qdrant+local:PATH?collection=NAME")
    p.add_argument("--recreate", action="store_true", help="drop and recreate the collection first")
    parser.set_defaults(_index_parser=parser)


def _print_stats(action: str, index, stats, as_json: bool) -> None:
    import json

    if as_json:
        print(json.dumps({"index": str(index.path), "stats": stats.to_dict(), "counts": index.manifest["counts"]},
                         indent=2))
        return
    s = stats
    secs = ", ".join(f"{k} {v:.1f}s" for k, v in s.seconds.items())
    print(f"{action} {index.path}: {s.documents} documents read ({s.added} new, {s.replaced} changed, "
          f"{s.unchanged} unchanged, {s.repeats} repeats), {s.chunks_added} chunks added, {s.chunks_removed} removed; "
          f"index now {index.manifest['counts']['documents']} documents / {index.manifest['counts']['chunks']} chunks "
          f"[{secs}]")


def _load_eval(args):
    from pathlib import Path

    from ..data import TASKS, load_items, resolve_task

    if args.eval_file in TASKS and not Path(args.eval_file).is_file():
        return resolve_task(args.eval_file, args.split or "eval", limit=args.limit).items
    return load_items(args.eval_file, args.dataset, limit=args.limit).items


def run(args: argparse.Namespace) -> int:
    import json

    cmd = getattr(args, "index_command", None)
    if cmd is None:
        args._index_parser.print_help()
        return 2
    if cmd == "build":
        from ..rag.store import build_index

        index, stats = build_index(args.sources, args.out, kind=args.kind, chunk_words=args.chunk_words,
                                   overlap=args.overlap, embed_model=args.embed_model, device=args.device,
                                   batch_size=args.batch_size, overwrite=args.force)
        _print_stats("built", index, stats, args.json)
        return 0
    if cmd == "add":
        from ..rag.store import add_to_index

        index, stats = add_to_index(args.index, args.sources, kind=args.kind, embed_model=args.embed_model,
                                    device=args.device, batch_size=args.batch_size)
        _print_stats("updated", index, stats, args.json)
        return 0
    if cmd == "query":
        from ..rag import load_retriever

        retriever = load_retriever(args.index, mode=args.mode, embed_model=args.embed_model, device=args.device)
        passages = retriever.search(args.text, args.k)
        if args.json:
            print(json.dumps([p.__dict__ for p in passages], indent=2, ensure_ascii=False))
        else:
            for rank, p in enumerate(passages, 1):
                print(f"{rank}. [{p.id}] score {p.score:.4f}  ({p.source})\n   {p.text}\n")
            if not passages:
                print("no passages found")
        return 0
    if cmd == "check-leakage":
        from ..rag import check_leakage, load_retriever, own_context_docs

        retriever = load_retriever(args.index, device=args.device)
        items = _load_eval(args)
        fields = tuple(f.strip() for f in args.fields.split(",") if f.strip())
        report = check_leakage(retriever, items, fields=fields, ngram=args.ngram,
                               ngram_threshold=args.ngram_threshold,
                               cosine_threshold=None if args.no_embedding else args.cosine,
                               allowed=None if args.count_own_context else own_context_docs(items))
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False) if args.json else report.summary(10))
        return 1 if report.has_leakage else 0
    if cmd == "info":
        from ..rag.store import LocalIndex

        print(json.dumps(LocalIndex.load(args.index).describe(), indent=2, ensure_ascii=False))
        return 0
    if cmd == "push":
        from ..rag.remote import connect, push_index
        from ..rag.store import LocalIndex

        index = LocalIndex.load(args.index)
        client, collection = connect(args.url)
        n = push_index(index, client, collection, recreate=args.recreate)
        print(f"pushed {n} chunks from {args.index} to Qdrant collection {collection!r}")
        return 0
    args._index_parser.print_help()
    return 2
