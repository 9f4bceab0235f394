"""The HTTP API: ``create_app(engine, settings) -> FastAPI``.

Routes are thin: they validate, apply limits, and hand work to the :class:`medqa.engine.Engine`
(answers, generation) on worker threads, so the event loop — and ``/healthz`` — never waits on the
model.  ``/v1/mcq`` goes through the :class:`~medqa.serve.batcher.Batcher`; generation runs on a
separate pool.  State lives on ``app.state`` (engine, settings, batcher, rate limiter, executors).
"""
from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Callable, Iterator

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import StreamingResponse
from starlette.middleware import Middleware

from ..engine.result import AnswerResult
from ..records import MedQAError
from .accesslog import AccessLogMiddleware
from .batcher import Batcher
from .chat import render_chat
from .errors import APIError, error_body, install_error_handlers
from .limits import BodySizeLimitMiddleware, RateLimiter, rate_limited
from .schemas import (ChatChoice, ChatChunkChoice, ChatCompletion, ChatCompletionChunk, ChatCompletionRequest,
                      ChatDelta, ChatResponseMessage, CompletionChoice, CompletionLogprobs, CompletionRequest,
                      CompletionResponse, Health, MCQRequest, ModelCard, ModelList, Usage, new_id)
from .settings import ServeSettings

log = logging.getLogger("medqa.serve")

API_DESCRIPTION = """\
OpenAI-compatible API for clinical multiple-choice QA (medqa).

* `/v1/models`, `/v1/chat/completions`, `/v1/completions`: use the official `openai` client with
  `base_url="http://HOST:PORT/v1"`.
* `/v1/mcq`: question + options -> answer letter, per-option probabilities, confidence/abstention,
  explanation and retrieved evidence (schema `medqa.answer/1`).
* Authentication: `Authorization: Bearer <API key>` when the server has keys.
* Errors: `{"error": {"message", "type", "param", "code"}}`.

Answers are not medical advice.
"""


# ---------------------------------------------------------------------------------------------- helpers
def _engine(request: Request):
    return request.app.state.engine


def _check_model(request: Request, model: str | None) -> str:
    names = request.app.state.model_names
    if model and model not in names:
        raise APIError(404, f"model {model!r} does not exist here; use one of {', '.join(names)} (GET /v1/models)",
                       code="model_not_found", param="model")
    return model or names[0]


def _max_tokens(settings: ServeSettings, requested: int | None) -> int:
    if requested is None:
        return min(settings.default_max_tokens, settings.max_tokens)
    if requested > settings.max_tokens:
        raise APIError(422, f"max_tokens={requested} is above this server's limit of {settings.max_tokens}; "
                            "ask for fewer tokens", code="max_tokens_exceeded", param="max_tokens")
    return requested


def _check_chars(settings: ServeSettings, text: str, what: str) -> None:
    if len(text) > settings.max_prompt_chars:
        raise APIError(422, f"{what} has {len(text)} characters; the limit is {settings.max_prompt_chars}: "
                            "shorten it", code="prompt_too_long", param=what)


def _count_tokens(engine: Any, text: str) -> int:
    tok = getattr(getattr(engine, "bundle", None), "tokenizer", None)
    if tok is None or not text:
        return 0
    return len(tok(text, add_special_tokens=False)["input_ids"])


async def _in_thread(request: Request, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(request.app.state.gen_executor, lambda: fn(*args, **kw))


async def _relay(request: Request, make_iter: Callable[[], Iterator[str]]) -> AsyncIterator[str]:
    """Run a blocking text iterator on a worker thread and yield its pieces in the event loop.

    ``make_iter`` runs first (it validates the prompt, so errors become a normal 4xx before any byte of
    the stream is sent).  Closing this generator (client gone) closes the iterator, which cancels generation.
    """
    loop = asyncio.get_running_loop()
    executor = request.app.state.gen_executor
    iterator = await loop.run_in_executor(executor, make_iter)
    queue: asyncio.Queue = asyncio.Queue()
    stop = threading.Event()

    def pump() -> None:
        try:
            for piece in iterator:
                loop.call_soon_threadsafe(queue.put_nowait, ("piece", piece))
                if stop.is_set():
                    break
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            loop.call_soon_threadsafe(queue.put_nowait, ("error", exc))
        finally:
            close = getattr(iterator, "close", None)
            if close:
                close()
            loop.call_soon_threadsafe(queue.put_nowait, ("end", None))

    async def pieces() -> AsyncIterator[str]:
        fut = loop.run_in_executor(executor, pump)
        try:
            while True:
                kind, value = await queue.get()
                if kind == "piece":
                    yield value
                elif kind == "error":
                    raise value
                else:
                    break
        finally:
            stop.set()
            if fut.done():
                fut.result()

    return pieces()


def _sse(obj: Any) -> str:
    data = obj.model_dump_json(exclude_none=True) if hasattr(obj, "model_dump_json") else json.dumps(obj)
    return f"data: {data}\n\n"


def _sse_response(events: AsyncIterator[str]) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _stream_events(request: Request, pieces: AsyncIterator[str], chunk: Callable[[str | None, str | None], Any],
                         prompt: str, max_tokens: int, include_usage: bool, usage_chunk: Callable[[Usage], Any]
                         ) -> AsyncIterator[str]:
    """SSE lines for a streamed generation; a mid-stream failure becomes an ``error`` event, then ``[DONE]``."""
    engine = _engine(request)
    text = []
    try:
        yield _sse(chunk(None, None))
        async for piece in pieces:
            text.append(piece)
            yield _sse(chunk(piece, None))
        completion_tokens = _count_tokens(engine, "".join(text))
        reason = "length" if completion_tokens >= max_tokens else "stop"
        yield _sse(chunk(None, reason))
        if include_usage:
            p = _count_tokens(engine, prompt)
            yield _sse(usage_chunk(Usage(prompt_tokens=p, completion_tokens=completion_tokens,
                                         total_tokens=p + completion_tokens)))
    except Exception as exc:  # noqa: BLE001 - the status line is already sent: report in-band
        rid = request.scope.get("state", {}).get("request_id", "-")
        if isinstance(exc, (MedQAError, APIError)):
            message = str(exc)
        else:
            log.error("stream failed request_id=%s: %s", rid, type(exc).__name__)
            message = f"generation failed (request id {rid}); the server log has details"
        yield f"data: {json.dumps(error_body(500, message))}\n\n"
    yield "data: [DONE]\n\n"


# ---------------------------------------------------------------------------------------------- routes
public = APIRouter()
v1 = APIRouter(prefix="/v1", dependencies=[Depends(rate_limited)])


@public.get("/healthz", response_model=Health, tags=["ops"], summary="Liveness/readiness (no auth)")
async def healthz(request: Request) -> Health:
    st = request.app.state
    stats = getattr(st.batcher, "stats", None)
    return Health(model=st.model_names[0], ready=True, queue=st.batcher.queued,
                  batching=stats.as_dict() if stats else {}, uptime_s=round(time.monotonic() - st.started, 3))


@v1.get("/models", response_model=ModelList, tags=["openai"])
async def list_models(request: Request) -> ModelList:
    return ModelList(data=[ModelCard(id=name, created=request.app.state.created) for name in request.app.state.model_names])


@v1.post("/mcq", response_model=AnswerResult, tags=["medqa"], summary="Answer a multiple-choice question",
         response_description="The answer (schema medqa.answer/1)")
async def mcq(body: MCQRequest, request: Request) -> AnswerResult:
    from ..engine.options import make_item

    settings: ServeSettings = request.app.state.settings
    _check_chars(settings, body.question + "".join(body.options) + body.context, "question")
    item = make_item(body.question, body.options or None, id=body.id, context=body.context)
    explain = settings.explain_default if body.explain is None else body.explain
    max_new = _max_tokens(settings, body.max_explanation_tokens or settings.explain_max_tokens) if explain else 0
    rag_k = 0 if body.rag is False else None
    return await request.app.state.batcher.submit(item, group=(explain, max_new, rag_k))


@v1.post("/chat/completions", response_model=ChatCompletion, tags=["openai"],
         responses={200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE chunks with stream=true"}})
async def chat_completions(body: ChatCompletionRequest, request: Request):
    settings: ServeSettings = request.app.state.settings
    engine = _engine(request)
    model = _check_model(request, body.model)
    max_tokens = _max_tokens(settings, body.token_budget())
    prompt, default_stops = render_chat(body.messages, getattr(getattr(engine, "bundle", None), "tokenizer", None))
    _check_chars(settings, prompt, "messages")
    stops = ([body.stop] if isinstance(body.stop, str) else list(body.stop or [])) + default_stops
    kw = dict(max_tokens=max_tokens, temperature=body.temperature or 0.0, stop=stops, top_p=body.top_p or 1.0)
    if body.stream:
        cid, created = new_id("chatcmpl"), int(time.time())

        def chunk(piece: str | None, reason: str | None) -> ChatCompletionChunk:
            delta = ChatDelta(role="assistant", content="") if piece is None and reason is None else ChatDelta(content=piece)
            return ChatCompletionChunk(id=cid, created=created, model=model,
                                       choices=[ChatChunkChoice(delta=delta, finish_reason=reason)])

        def usage_chunk(u: Usage) -> ChatCompletionChunk:
            return ChatCompletionChunk(id=cid, created=created, model=model, choices=[], usage=u)

        pieces = await _relay(request, lambda: engine.stream(prompt, **kw))
        include = bool(body.stream_options and body.stream_options.include_usage)
        return _sse_response(_stream_events(request, pieces, chunk, prompt, max_tokens, include, usage_chunk))
    done = await _in_thread(request, engine.complete, prompt, **kw)
    return ChatCompletion(model=model, choices=[ChatChoice(message=ChatResponseMessage(content=done.text),
                                                           finish_reason=done.finish_reason)],
                          usage=Usage(prompt_tokens=done.prompt_tokens, completion_tokens=done.completion_tokens,
                                      total_tokens=done.prompt_tokens + done.completion_tokens))


@v1.post("/completions", response_model=CompletionResponse, tags=["openai"],
         responses={200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE chunks with stream=true"}})
async def completions(body: CompletionRequest, request: Request):
    settings: ServeSettings = request.app.state.settings
    engine = _engine(request)
    model = _check_model(request, body.model)
    max_tokens = _max_tokens(settings, body.max_tokens)
    prompt = body.prompt_text()
    _check_chars(settings, prompt, "prompt")
    if body.logprobs is not None:
        if body.stream:
            raise APIError(422, "logprobs cannot be combined with stream=true here; send a non-streaming request",
                           code="unsupported_parameter", param="logprobs")
        from .logprobs import complete_with_logprobs

        done, lp = await _in_thread(request, complete_with_logprobs, engine, prompt, max_tokens,
                                    body.temperature or 0.0, body.top_p or 1.0, body.stop, body.logprobs, body.echo)
        text = (prompt + done.text) if body.echo else done.text
        return CompletionResponse(model=model, choices=[CompletionChoice(
            text=text, finish_reason=done.finish_reason, logprobs=CompletionLogprobs(**lp))],
            usage=Usage(prompt_tokens=done.prompt_tokens, completion_tokens=done.completion_tokens,
                        total_tokens=done.prompt_tokens + done.completion_tokens))
    kw = dict(max_tokens=max_tokens, temperature=body.temperature or 0.0, stop=body.stop, top_p=body.top_p or 1.0)
    if body.stream:
        cid, created = new_id("cmpl"), int(time.time())

        def chunk(piece: str | None, reason: str | None) -> CompletionResponse:
            text = (prompt if body.echo else "") if piece is None and reason is None else (piece or "")
            return CompletionResponse(id=cid, created=created, model=model,
                                      choices=[CompletionChoice(text=text, finish_reason=reason)])

        def usage_chunk(u: Usage) -> CompletionResponse:
            return CompletionResponse(id=cid, created=created, model=model, choices=[], usage=u)

        pieces = await _relay(request, lambda: engine.stream(prompt, **kw))
        include = bool(body.stream_options and body.stream_options.include_usage)
        return _sse_response(_stream_events(request, pieces, chunk, prompt, max_tokens, include, usage_chunk))
    done = await _in_thread(request, engine.complete, prompt, **kw)
    text = (prompt + done.text) if body.echo else done.text
    return CompletionResponse(model=model, choices=[CompletionChoice(text=text, finish_reason=done.finish_reason)],
                              usage=Usage(prompt_tokens=done.prompt_tokens, completion_tokens=done.completion_tokens,
                                          total_tokens=done.prompt_tokens + done.completion_tokens))


# ---------------------------------------------------------------------------------------------- app
def _answer_batch(engine: Any) -> Callable:
    def run(group: tuple, items: list) -> list:
        explain, max_new, rag_k = group
        kw: dict = {"explain": explain, "rag_k": rag_k}
        if explain:
            kw["max_new_tokens"] = max_new
        return engine.answer_batch(items, **kw)

    return run


def create_app(engine: Any, settings: ServeSettings | None = None) -> FastAPI:
    """The FastAPI app over ``engine`` (anything with the :class:`medqa.engine.Engine` methods)."""
    settings = settings or ServeSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        st = app.state
        st.score_executor = ThreadPoolExecutor(1, thread_name_prefix="medqa-score")
        st.gen_executor = ThreadPoolExecutor(max(4, 4 * settings.generate_concurrency), thread_name_prefix="medqa-gen")
        st.batcher = Batcher(_answer_batch(engine), st.score_executor, settings.batch_window_ms, settings.max_batch,
                             settings.max_queue, settings.batch_window_frac, settings.max_batch_window_ms)
        st.batcher.start()
        log.info("serving model %s (%s)", st.model_names[0], json.dumps(settings.public_dict()))
        try:
            yield
        finally:
            await st.batcher.stop()
            st.score_executor.shutdown(wait=False, cancel_futures=True)
            st.gen_executor.shutdown(wait=False, cancel_futures=True)

    app = FastAPI(
        title="medqa API", version=_version(), description=API_DESCRIPTION, lifespan=lifespan,
        middleware=[Middleware(AccessLogMiddleware, log_bodies=settings.log_bodies),
                    Middleware(BodySizeLimitMiddleware, max_bytes=settings.max_body_bytes)],
        # FastAPI's OpenTelemetry logs would record validation errors *with their input values* (patient text).
        telemetry={"logs": settings.log_bodies},
    )
    st = app.state
    st.engine, st.settings = engine, settings
    st.key_values = settings.key_values()
    st.rate_limiter = RateLimiter(settings.rate_limit_per_min, settings.rate_limit_burst or 1)
    st.model_names = list(dict.fromkeys([settings.model_name, getattr(engine, "model_name", settings.model_name)]))
    st.started, st.created = time.monotonic(), int(time.time())
    st.batcher = _NotStarted()
    install_error_handlers(app)
    app.include_router(public)
    app.include_router(v1)
    if settings.cors_origins:
        from fastapi.middleware.cors import CORSMiddleware

        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"],
                           allow_headers=["Authorization", "Content-Type"])
    if settings.ui:
        from .ui import mount_ui

        mount_ui(app, engine, settings)
    return app


class _NotStarted:
    queued = 0

    async def submit(self, *a, **k):
        raise APIError(503, "server is starting; retry in a moment", code="starting", headers={"Retry-After": "1"})


def _version() -> str:
    from .. import __version__

    return __version__
