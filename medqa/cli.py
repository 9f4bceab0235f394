"""The ``medqa`` command line: one table of subcommands, heavy imports inside each command."""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

# name -> (module under medqa.commands, one-line help).  Each module defines
# ``configure(parser)`` (argparse only, cheap) and ``run(args) -> int`` (imports torch etc. lazily).
COMMANDS: dict[str, tuple[str, str]] = {
    "data": ("data", "inspect and validate datasets"),
    "doctor": ("doctor", "check torch build, devices, dtypes, libraries and the Hub"),
    "eval": ("eval", "evaluate a model on one or more MCQ benchmarks"),
    "train": ("train", "LoRA fine-tune a causal LM on MCQ data"),
    "ask": ("ask", "answer one question with probabilities and an explanation"),
    "predict": ("predict", "batch prediction over a dataset file"),
    "export": ("export", "merge/export an adapter for serving"),
    "serve": ("serve", "OpenAI-compatible HTTP API"),
    "ui": ("ui", "Gradio demo"),
    "index": ("index", "build a retrieval index for RAG"),
    "quickstart": ("quickstart", "the README main job on the embedded default model"),
}


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(prog="medqa", description="Clinical multiple-choice QA toolkit")
    parser.add_argument("--version", action="version", version=f"medqa {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_) in COMMANDS.items():
        try:
            mod = importlib.import_module(f"medqa.commands.{module}")
        except ModuleNotFoundError as e:  # command not built yet in this checkout
            if e.name != f"medqa.commands.{module}":
                raise
            continue
        p = sub.add_parser(name, help=help_, description=(mod.__doc__ or help_).strip().splitlines()[0])
        mod.configure(p)
        p.set_defaults(_run=mod.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    import os

    # Idle OpenMP workers sleep instead of spinning: on a shared or busy CPU spinning workers steal the
    # time slices their siblings need (a LoRA step ran 8x faster with PASSIVE at load ~9 on 2 cores).
    # Must be set before torch is imported, which every command does lazily after this point.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from .records import MedQAError

    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    if not getattr(args, "_run", None):
        parser.print_help()
        return 2
    try:
        return int(args._run(args) or 0)
    except MedQAError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `medqa ... | head`: the reader left; not an error worth a traceback
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
