"""`prd-jax serve`: a model behind the OpenAI API (starlette on uvicorn).

starlette + uvicorn: a small, well-kept ASGI pair (the stack under FastAPI and vLLM's
server) that gives async handlers, so many requests wait on the decode thread at once
while `engine.Engine` batches them, and uvicorn's graceful SIGTERM shutdown.

Endpoints: `GET /health` (200 once the model is loaded and its first program compiled,
503 before), `GET /v1/models`, `POST /v1/completions`, `POST /v1/chat/completions`.
`usage` counts the prompt's tokens once per request and every generated token of every
choice, the stop token included (what the in-graph budgets count).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from typing import List

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from prd_jax import fileio
from prd_jax.checkpoint import load_workdir
from prd_jax.data.synthetic import CharVocab
from prd_jax.model import load
from prd_jax.serve import protocol as P
from prd_jax.serve.engine import Engine, Row

log = logging.getLogger(__name__)


def _error(e: P.RequestError) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status)


async def _json(request: Request) -> dict:
    try:
        body = await request.json()
    except (ValueError, UnicodeDecodeError):
        raise P.RequestError(400, "the request body is not valid JSON", "body")
    if not isinstance(body, dict):
        raise P.RequestError(400, "the request body must be a JSON object", "body")
    return body


def build_app(engine: Engine, served_name: str) -> Starlette:
    tok = engine.tok

    async def health(_):
        if engine.error is not None:
            return JSONResponse({"status": "error", "error": str(engine.error)}, status_code=500)
        return JSONResponse({"status": "ok" if engine.ready.is_set() else "loading", "sampler_calls": engine.calls,
                             "peak_rows": engine.peak_rows},
                            status_code=200 if engine.ready.is_set() else 503)

    async def models(_):
        return JSONResponse({"object": "list", "data": [{"id": served_name, "object": "model", "created": 0,
                                                         "owned_by": "prd-jax", "max_model_len": engine.context}]})

    async def decode(prompts: List[List[int]], max_tokens: int, samp: dict, top: int) -> list:
        for p in prompts:
            P.check_context(len(p), max_tokens, engine.context)
        rows = [Row(p, max_tokens, samp["temperature"], samp["top_p"], samp["top_k"], samp["seed"], j, top)
                for p in prompts for j in range(samp["n"])]
        return await asyncio.gather(*(asyncio.wrap_future(f) for f in engine.submit(rows)))

    async def checked(request: Request) -> dict:
        req = await _json(request)
        P.check_model(req, served_name)
        P.refuse(req)
        return req

    def token_text(t: int, as_ids: bool) -> str:
        return f"token_id:{t}" if as_ids else tok.decode([t])

    async def completions(request: Request):
        try:
            req = await checked(request)
            prompts = P.prompts_of(req, tok)
            samp = P.sampling_fields(req)
            max_tokens = P._num(req, "max_tokens", 16, int, 1)
            logprobs = req.get("logprobs")
            if logprobs is not None:
                logprobs = P._num(req, "logprobs", 0, int, 0, tok.vocab_size)
            stops, as_ids = P.stop_strings(req), bool(req.get("return_tokens_as_token_ids"))
            outs = await decode(prompts, max_tokens, samp, logprobs or 0)
        except P.RequestError as e:
            return _error(e)
        choices, generated = [], 0
        for index, out in enumerate(outs):
            ids, text, hit = P.cut_at_stop(out.ids, tok.decode, stops)
            generated += len(ids)
            choice = {"index": index, "text": text,
                      "finish_reason": "stop" if (out.stopped or hit) else "length", "logprobs": None}
            if logprobs is not None:
                choice["logprobs"] = {"tokens": [token_text(t, as_ids) for t in ids],
                                      "token_logprobs": out.logprobs[:len(ids)],
                                      "top_logprobs": ([{token_text(t, as_ids): v for t, v in out.top.items()}]
                                                       + [{}] * (len(ids) - 1)) if out.top else None}
            if req.get("return_token_ids"):
                choice["token_ids"] = ids
            choices.append(choice)
        prompt_tokens = sum(len(p) for p in prompts)
        return JSONResponse(P.envelope("text_completion", served_name, choices, prompt_tokens, generated))

    async def chat(request: Request):
        try:
            req = await checked(request)
            prompt = P.chat_prompt(req, tok)
            samp = P.sampling_fields(req)
            field = "max_completion_tokens" if req.get("max_completion_tokens") is not None else "max_tokens"
            default = max(1, min(4096, engine.context - len(prompt)))
            max_tokens = P._num(req, field, default, int, 1)
            top = P._num(req, "top_logprobs", 0, int, 0, tok.vocab_size) if req.get("logprobs") else 0
            stops, as_ids = P.stop_strings(req), bool(req.get("return_tokens_as_token_ids"))
            outs = await decode([prompt], max_tokens, samp, top)
        except P.RequestError as e:
            return _error(e)
        choices, generated = [], 0
        for index, out in enumerate(outs):
            ids, text, hit = P.cut_at_stop(out.ids, tok.decode, stops)
            generated += len(ids)
            choice = {"index": index, "message": {"role": "assistant", "content": text},
                      "finish_reason": "stop" if (out.stopped or hit) else "length", "logprobs": None}
            if req.get("logprobs"):
                tops = [{"token": token_text(t, as_ids), "logprob": v} for t, v in out.top.items()]
                choice["logprobs"] = {"content": [
                    {"token": token_text(t, as_ids), "logprob": lp, "top_logprobs": tops if i == 0 else []}
                    for i, (t, lp) in enumerate(zip(ids, out.logprobs))]}
            choices.append(choice)
        return JSONResponse(P.envelope("chat.completion", served_name, choices, len(prompt), generated))

    def guarded(handler):
        async def endpoint(request):
            try:
                return await handler(request)
            except Exception as e:  # a bug or a failed decode: a 500 for this request, the server stays up
                log.exception("request failed")
                return _error(P.RequestError(500, f"internal error: {type(e).__name__}: {e}"))
        return endpoint

    routes = [Route("/health", health), Route("/v1/models", models),
              Route("/v1/completions", guarded(completions), methods=["POST"]),
              Route("/v1/chat/completions", guarded(chat), methods=["POST"])]
    return Starlette(routes=routes)


class ServedCharVocab(CharVocab):
    """The char vocabulary of a from-scratch run, served: chats render in its fixed chat format
    (`CharVocab.apply_chat_template`, the format its SFT data used); it has no template
    variables, so a request's `chat_template_kwargs` is refused with a 400 naming it."""

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, **template_vars):
        if template_vars:
            raise P.RequestError(400, f"chat_template_kwargs {sorted(template_vars)}: this model uses the synthetic "
                                      "char vocabulary, whose fixed chat format takes no template variables; "
                                      "allowed: none", "chat_template_kwargs")
        return super().apply_chat_template(messages, add_generation_prompt)


def load_for_serving(model, path, workdir, dtype: str = "float32"):
    """(cfg, params, tokenizer, name) for `--model/--path` (`--model` None: from --path, else
    smollm2-135m) or a training `--workdir` (its newest readable checkpoint over the model and
    tokenizer its config.json names: `checkpoint.load_workdir`, char-vocabulary runs included,
    served as `ServedCharVocab`)."""
    if workdir:
        loaded = load_workdir(workdir, dtype=dtype)
        step = loaded.source.rsplit("@", 1)[1]
        run_model = (fileio.read_json(f"{workdir.rstrip('/')}/config.json").get("model") or {}).get("name") or "model"
        log.info("serving %s", loaded.source)
        tok = ServedCharVocab(loaded.tokenizer.chars) if isinstance(loaded.tokenizer, CharVocab) else loaded.tokenizer
        return loaded.cfg, loaded.params, tok, f"{run_model}@{step}"
    loaded = load(model, path, dtype=dtype)
    return loaded.cfg, loaded.params, loaded.tokenizer, model or (os.path.basename(os.path.normpath(path)) if path
                                                                  else "smollm2-135m")


def serve(args) -> None:
    """Load, start the engine (it compiles its first program), run uvicorn until SIGTERM."""
    cfg, params, tok, name = load_for_serving(args.model, args.path, args.workdir, args.dtype)
    if tok is None:
        raise ValueError(f"model {args.model or args.path!r} has no tokenizer to serve (tokenizer.json missing)")
    engine = Engine(cfg, params, tok, max_rows=args.max_batch_rows, wait_s=args.batch_wait_ms / 1000,
                    prompt_buckets=args.prompt_buckets, warmup_max_tokens=args.warmup_max_tokens,
                    decode_chunk=args.decode_chunk)
    app = build_app(engine, args.served_name or name)
    t0 = time.time()
    log.info("serving %s on http://%s:%d (context %d)", args.served_name or name, args.host, args.port,
             cfg.max_position)
    # uvicorn drains in-flight requests on SIGTERM / SIGINT, then re-raises the signal to the
    # handler it found: ours lets the process finish its shutdown and exit 0.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=30)
    finally:
        signal.signal(signal.SIGTERM, previous)
    engine.stop()
    log.info("stopped after %.0f s", time.time() - t0)
