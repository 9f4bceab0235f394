"""Serve the model over an OpenAI-compatible HTTP API (plus /v1/mcq), optionally with the Gradio demo at /ui.

Examples::

    medqa serve                                            # embedded model on http://127.0.0.1:8000
    medqa serve --adapter runs/train-x/adapter --ui        # fine-tuned adapter + demo at /ui
    MEDQA_API_KEYS=$(python -c 'import secrets;print(secrets.token_urlsafe(32))') medqa serve --host 0.0.0.0
    medqa serve --remote-url http://gpu:8000/v1 --remote-model medqa --adapter exports/medqa-lora   # vLLM backend

Every flag can also be set by environment (``MEDQA_PORT``, ``MEDQA_API_KEYS=k1,k2``, ...; see docs/serving.md).
Without API keys the server only binds loopback addresses unless ``--insecure`` is given.
"""
from __future__ import annotations

import argparse
import os

# flag dest -> ServeSettings field, for flags that override MEDQA_* environment settings
SETTINGS_FLAGS = {
    "host": "host", "port": "port", "insecure": "insecure", "model_name": "model_name",
    "max_body_bytes": "max_body_bytes", "max_tokens": "max_tokens", "rate_limit": "rate_limit_per_min",
    "batch_window_ms": "batch_window_ms", "max_batch": "max_batch", "log_bodies": "log_bodies", "ui": "ui",
}


def add_engine_args(p: argparse.ArgumentParser) -> None:
    """Model/engine flags shared by ``serve`` and ``ui``."""
    from .ask import add_model_args

    add_model_args(p)  # --model --adapter --device --dtype --abstain-below --max-new-tokens --rag --rag-k
    r = p.add_argument_group("remote model server (vLLM, llama.cpp, another medqa serve)")
    r.add_argument("--remote-url", metavar="URL", help="use an OpenAI-compatible server as the model backend "
                   "(e.g. http://gpu-box:8000/v1); --adapter then only supplies calibration.json")
    r.add_argument("--remote-model", metavar="NAME", help="model name on that server (vLLM LoRA: the NAME of "
                   "--lora-modules NAME=DIR)")
    r.add_argument("--remote-api-key", metavar="KEY", help="API key for the remote server (or env MEDQA_REMOTE_API_KEY)")
    r.add_argument("--remote-scoring", default="top", choices=("top", "auto", "echo"),
                   help="how option probabilities are read: top (default; one request per question), "
                        "echo (exact, vLLM), auto (top, then echo for letters outside the top 20); docs/serving.md")


def configure(p: argparse.ArgumentParser) -> None:
    add_engine_args(p)
    s = p.add_argument_group("server")
    s.add_argument("--host", help="address to bind (default 127.0.0.1; env MEDQA_HOST)")
    s.add_argument("--port", type=int, help="port (default 8000; env MEDQA_PORT)")
    s.add_argument("--api-key", action="append", metavar="KEY", dest="api_keys",
                   help="accepted Bearer key; repeat for several (or env MEDQA_API_KEYS=k1,k2)")
    s.add_argument("--insecure", action="store_true", default=None,
                   help="allow binding a non-loopback address without API keys (trusted networks only)")
    s.add_argument("--ui", action="store_true", default=None, help="mount the Gradio demo at /ui")
    s.add_argument("--model-name", metavar="ID", help="model id listed by /v1/models (default medqa)")
    s.add_argument("--max-body-bytes", type=int, metavar="N", help="largest request body (default 65536)")
    s.add_argument("--max-tokens", type=int, metavar="N", help="largest max_tokens a request may ask for (default 512)")
    s.add_argument("--rate-limit", type=float, metavar="PER_MIN", help="requests per minute per key (default 600; 0 = off)")
    s.add_argument("--batch-window-ms", type=float, metavar="MS", help="/v1/mcq batching window (default 5; 0 = off)")
    s.add_argument("--max-batch", type=int, metavar="N", help="questions per scoring batch (default 16)")
    s.add_argument("--log-bodies", action="store_true", default=None,
                   help="log request bodies (off by default: questions may contain patient data)")


def settings_from_args(args: argparse.Namespace):
    """ServeSettings from MEDQA_* env, overridden by the flags actually given."""
    from pydantic import ValidationError

    from ..records import MedQAError
    from ..serve.settings import ServeSettings

    given = {field: getattr(args, dest) for dest, field in SETTINGS_FLAGS.items() if getattr(args, dest, None) is not None}
    if getattr(args, "api_keys", None):
        given["api_keys"] = args.api_keys
    if getattr(args, "max_new_tokens", None) is not None:
        given["explain_max_tokens"] = args.max_new_tokens
    try:
        settings = ServeSettings(**given)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'settings'}: {err['msg']}" for err in e.errors())
        raise MedQAError(f"invalid server settings: {problems}") from None
    return settings


def build_engine(args: argparse.Namespace):
    """The local Engine, or a RemoteEngine with --remote-url."""
    from ..records import MedQAError
    from .ask import load_retriever_arg

    retriever = load_retriever_arg(args.rag, args.rag_k)
    if args.remote_url:
        from ..serve.remote import RemoteEngine

        if not args.remote_model:
            raise MedQAError("--remote-url needs --remote-model NAME (the model id the remote server lists at /v1/models)")
        return RemoteEngine.connect(args.remote_url, args.remote_model,
                                    args.remote_api_key or os.environ.get("MEDQA_REMOTE_API_KEY"),
                                    scoring=args.remote_scoring, calibration=args.adapter, retriever=retriever,
                                    abstain_below=args.abstain_below, rag_k=args.rag_k)
    if args.remote_model:
        raise MedQAError("--remote-model needs --remote-url")
    from ..engine import Engine

    return Engine.load(args.model, adapter=args.adapter, device=args.device, dtype=args.dtype, retriever=retriever,
                       abstain_below=args.abstain_below, rag_k=args.rag_k)


def run(args: argparse.Namespace) -> int:
    from ..serve.app import create_app
    from ..serve.server import serve_forever

    settings = settings_from_args(args)
    settings.check_bind()  # before the (slow) model load
    engine = build_engine(args)
    app = create_app(engine, settings)
    scheme_host = f"http://{'[' + settings.host + ']' if ':' in settings.host else settings.host}:{settings.port}"
    print(f"medqa API on {scheme_host}/v1 (docs {scheme_host}/docs"
          + (f", demo {scheme_host}/ui" if settings.ui else "") + ")"
          + ("" if settings.auth_enabled else " — no API keys: loopback/insecure mode"), flush=True)
    serve_forever(app, settings)
    return 0
