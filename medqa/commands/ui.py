"""Launch the Gradio demo on its own (``medqa serve --ui`` mounts the same demo at /ui next to the API).

Examples::

    medqa ui                                  # embedded model, http://127.0.0.1:7860
    medqa ui --adapter runs/train-x/adapter --rag runs/index
    medqa ui --remote-url http://gpu:8000/v1 --remote-model medqa
"""
from __future__ import annotations

import argparse


def configure(p: argparse.ArgumentParser) -> None:
    from .serve import add_engine_args

    add_engine_args(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    p.add_argument("--api-key", action="append", metavar="KEY", dest="api_keys",
                   help="require a login whose password is this key (repeatable; or env MEDQA_API_KEYS)")
    p.add_argument("--insecure", action="store_true", help="allow a non-loopback --host without --api-key")


def run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from ..records import MedQAError
    from ..serve.settings import ServeSettings
    from ..serve.ui import build_ui, gradio_auth, CSS
    from .serve import build_engine

    given: dict = {"host": args.host, "port": args.port, "insecure": args.insecure}
    if args.api_keys:
        given["api_keys"] = args.api_keys
    try:
        settings = ServeSettings(**given)
    except ValidationError as e:
        raise MedQAError("invalid settings: " + "; ".join(err["msg"] for err in e.errors())) from None
    settings.check_bind()
    engine = build_engine(args)
    demo = build_ui(engine)
    demo.queue(default_concurrency_limit=2).launch(
        server_name=settings.host, server_port=settings.port, auth=gradio_auth(settings), share=False,
        ssr_mode=False, footer_links=[], show_error=True, css=CSS, mcp_server=False)
    return 0
