"""Answer one multiple-choice question with calibrated probabilities, a confidence label and an explanation.

Examples::

    medqa ask "Drug of choice for absence seizures?" --options "A) Ethosuximide B) Phenytoin C) Carbamazepine"
    medqa ask "Drug of choice for absence seizures?" --option Ethosuximide --option Phenytoin --json
    medqa ask "Drug of choice for absence seizures? A) Ethosuximide B) Phenytoin"   # options inline

The answer is the highest-scoring option (one forward pass), never parsed from generated text; the
explanation is generated afterwards, conditioned on that answer.
"""
from __future__ import annotations

import argparse
import sys


def add_model_args(parser: argparse.ArgumentParser) -> None:
    """Model/engine options shared by ``ask`` and ``predict``."""
    parser.add_argument("--model", default="embedded", help="embedded (default), a Hub id, a local or merged model folder, or a .gguf file")
    parser.add_argument("--adapter", metavar="DIR", help="LoRA adapter folder (its calibration.json is used when present)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda[:N], rocm[:N] or mps")
    parser.add_argument("--dtype", default="auto", choices=("auto", "bf16", "fp16", "fp32"))
    parser.add_argument("--threads", default="auto", metavar="N",
                        help="torch CPU threads: auto (default; 1 when the CPU is oversubscribed) or a number (0 = torch default)")
    parser.add_argument("--abstain-below", type=float, default=0.5, metavar="P",
                        help="abstain when the top option's probability is below P (default 0.5; 0 never abstains)")
    parser.add_argument("--max-new-tokens", type=int, default=96, metavar="N", help="explanation length limit in tokens (default 96)")
    parser.add_argument("--rag", metavar="INDEX_DIR", help="retrieve evidence from this index (built with `medqa index`)")
    parser.add_argument("--rag-k", type=int, default=3, metavar="K", help="passages to retrieve with --rag (default 3)")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("question", help='the question text ("-" reads it from stdin); may end with its options "A) .. B) .."')
    opts = parser.add_mutually_exclusive_group()
    opts.add_argument("--options", metavar="TEXT", help='all options in one string: "A) x B) y" (also A. / (A) / A: forms, newlines ok)')
    opts.add_argument("--option", action="append", metavar="TEXT", help="one option; repeat 2-5 times, in order A, B, ...")
    add_model_args(parser)
    parser.add_argument("--no-explain", action="store_true", help="skip the explanation (answer and probabilities only)")
    parser.add_argument("--json", action="store_true", help="print the answer as JSON (schema medqa.answer/1, see docs/answer_schema.md)")


def load_retriever_arg(path: str | None, k: int | None = None):
    """The retriever for ``--rag PATH`` (None without it), with a clear error when RAG is not installed.

    ``k`` (``--rag-k``) is only validated here; the engine does the retrieving.
    """
    from ..records import MedQAError

    if k is not None and k < 0:
        raise MedQAError(f"--rag-k must be >= 0 (got {k})")
    if not path:
        return None
    try:
        from ..rag import load_retriever
    except ImportError as e:
        raise MedQAError(
            f"RAG not available: medqa.rag.load_retriever could not be imported ({e}); "
            "install the retrieval extras (pip install 'medqa[rag]') or drop --rag"
        ) from e
    return load_retriever(path)


def check_model_args(args: argparse.Namespace) -> None:
    """Fail on bad numbers before the model loads (seconds), not after."""
    from ..records import MedQAError

    if args.max_new_tokens < 1:
        raise MedQAError(f"--max-new-tokens must be at least 1 (got {args.max_new_tokens})")
    if not 0.0 <= args.abstain_below <= 1.0:
        raise MedQAError(f"--abstain-below must be between 0 and 1 (got {args.abstain_below}); 0 never abstains")
    if args.rag_k < 0:
        raise MedQAError(f"--rag-k must be >= 0 (got {args.rag_k})")
    if args.threads != "auto" and _int_arg(args.threads, "--threads") < 0:
        raise MedQAError(f"--threads must be 'auto' or a number >= 0 (got {args.threads}); 0 keeps torch's default")


def build_engine(args: argparse.Namespace, batch_size: int = 8):
    from ..engine import Engine

    retriever = load_retriever_arg(getattr(args, "rag", None), args.rag_k)
    threads = args.threads if args.threads == "auto" else _int_arg(args.threads, "--threads")
    return Engine.load(args.model, adapter=args.adapter, device=args.device, dtype=args.dtype, retriever=retriever,
                       abstain_below=args.abstain_below, batch_size=batch_size, rag_k=args.rag_k, threads=threads)


def _int_arg(text: str, flag: str) -> int:
    from ..records import MedQAError

    try:
        return int(text)
    except ValueError:
        raise MedQAError(f"{flag} must be 'auto' or a whole number (got {text!r})") from None


def _question_and_options(args: argparse.Namespace) -> tuple[str, list[str] | None]:
    from ..engine import parse_options_text

    question = sys.stdin.read() if args.question == "-" else args.question
    if args.options is not None:
        return question, parse_options_text(args.options)
    return question, args.option  # None: options must be inline in the question


def run(args: argparse.Namespace) -> int:
    from ..engine import make_item
    from ..formatting import format_answer

    check_model_args(args)
    question, options = _question_and_options(args)
    item = make_item(question, options)  # validate before spending seconds on loading the model
    engine = build_engine(args, batch_size=1)
    result = engine.answer_batch([item], explain=not args.no_explain, max_new_tokens=args.max_new_tokens)[0]
    print(result.model_dump_json(indent=2) if args.json else format_answer(result))
    return 0
