"""Export a LoRA adapter for serving: the adapter + vLLM --enable-lora files, or a merged full model.

Examples::

    medqa export --adapter runs/train-x/adapter --out exports/medqa-lora          # adapter + serve_vllm.sh
    medqa export --adapter runs/train-x/adapter --merge --out exports/medqa-merged
"""
from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--adapter", required=True, metavar="DIR", help="LoRA adapter folder (runs/train-.../adapter)")
    parser.add_argument("--out", required=True, metavar="DIR", help="new output folder")
    parser.add_argument("--merge", action="store_true", help="merge the adapter into the base weights (full model)")
    parser.add_argument("--model", help="base model (default: the one recorded in the adapter)")
    parser.add_argument("--dtype", default="auto", help="dtype of the merged weights (auto = fp32)")


def run(args: argparse.Namespace) -> int:
    from ..training.export import export

    res = export(args.adapter, args.out, merge=args.merge, model=args.model, dtype=args.dtype)
    print(f"{'merged model' if res['merged'] else 'adapter'} written to {res['out']}")
    print(f"serve with: {res['vllm']['command']}")
    return 0
