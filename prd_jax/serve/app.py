"""`prd-jax serve`: a model behind the OpenAI API (starlette on uvicorn).

starlette + uvicorn: a small, well-kept ASGI pair (the stack under FastAPI and vLLM's
server) that gives async handlers, so many requests wait on the decode thread at once
while `engine.Engine` batches them.

Endpoints: `GET /health` (200 once the model is loaded and its first program compiled,
503 before and while draining), `GET /v1/models`, `POST /v1/completions`, `POST
/v1/chat/completions` (bodies: `protocol`; answers and streams: `generation`), `GET
/metrics` (`metrics`), `GET /openapi.json`. With an API key every `/v1/` request needs
`Authorization: Bearer KEY` (401 otherwise; the key is never logged). Past
`max_queued` requests waiting for a slot, a request gets 429 with `Retry-After`. On SIGTERM
the server drains: new requests get 503, in-flight ones finish, then it exits. 429 and 503
carry `Retry-After` estimated from the queue and recent service times (`retry_after_s`).
"""

from __future__ import annotations

import hmac
import logging
import math
import os
import signal
import threading
import time
from typing import Optional

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from prd_jax import fileio
from prd_jax.checkpoint import load_workdir
from prd_jax.data.synthetic import CharVocab
from prd_jax.mesh import make_mesh
from prd_jax.model import load
from prd_jax.serve import protocol as P
from prd_jax.serve.engine import Engine
from prd_jax.serve.generation import Job
from prd_jax.serve.metrics import Metrics

log = logging.getLogger(__name__)
RETRY_AFTER_RANGE_S = (1, 60)  # Retry-After is clamped to this range (integer seconds)


def retry_after_s(rows_ahead: int, mean_service_s: Optional[float], slots: int) -> int:
    """`Retry-After` (RFC 9110 delay-seconds) of a 429 or 503, our rule: `slots` decode slots
    each free a row every `mean_service_s` seconds (the recent mean time a row holds a slot,
    `Engine.mean_service_s`), so the `rows_ahead` of a retry are through in about
    `ceil(rows_ahead * mean_service_s / slots)` seconds, clamped to `RETRY_AFTER_RANGE_S`
    (the lower bound before any row has finished). A full queue (429) counts the rows waiting
    for a slot; a draining server (503) counts those and the rows in the slots."""
    low, high = RETRY_AFTER_RANGE_S
    if mean_service_s is None:
        return low
    return max(low, min(high, math.ceil(rows_ahead * mean_service_s / slots)))


def _error(e: P.RequestError, headers: Optional[dict] = None) -> JSONResponse:
    return JSONResponse(e.body(), status_code=e.status, headers=headers)


class Gate:
    """Draining state and the requests in flight (SIGTERM waits for them)."""

    def __init__(self):
        self.draining, self.in_flight = False, 0


def build_app(engine: Engine, served_name: str, api_key: Optional[str] = None, max_queued: Optional[int] = None,
              gate: Optional[Gate] = None) -> Starlette:
    gate = gate or Gate()
    metrics = Metrics(engine)

    async def health(_):
        if engine.error is not None:
            return JSONResponse({"status": "error", "error": str(engine.error)}, status_code=500)
        state = "draining" if gate.draining else "ok" if engine.ready.is_set() else "loading"
        return JSONResponse({"status": state, "sampler_calls": engine.calls, "peak_rows": engine.peak_rows,
                             "prefills": engine.prefills, "slots_in_use": engine.slots_in_use,
                             "queued_requests": engine.queued_requests}, status_code=200 if state == "ok" else 503)

    async def models(_):
        return JSONResponse({"object": "list", "data": [{"id": served_name, "object": "model", "created": 0,
                                                         "owned_by": "prd-jax", "max_model_len": engine.context}]})

    async def metrics_text(_):
        return Response(metrics.text(), media_type="text/plain; version=0.0.4")

    document = P.openapi(f"prd-jax serve: {served_name}")

    async def openapi(_):
        return JSONResponse(document)

    def authorised(request: Request) -> bool:
        given = request.headers.get("authorization", "")
        return hmac.compare_digest(given.encode(), f"Bearer {api_key}".encode())

    async def generate(request: Request, chat: bool):
        if gate.draining:
            raise P.RequestError(503, "the server is shutting down; retry elsewhere")
        if api_key is not None and not authorised(request):
            raise P.RequestError(401, "missing or wrong API key: send 'Authorization: Bearer KEY'", "authorization")
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise P.RequestError(400, "the request body is not valid JSON", "body")
        req = P.parse(P.ChatRequest if chat else P.CompletionRequest, body)
        P.check_model(req, served_name)
        if max_queued is not None and engine.queued_requests >= max_queued:
            raise P.RequestError(429, f"{engine.queued_requests} requests are waiting for a decode slot "
                                      f"(--max-queued-requests {max_queued}); retry later")
        job = Job(req, chat, engine, served_name, metrics)
        job.submit(engine)
        if req.stream:
            gate.in_flight += 1

            async def stream():
                try:
                    async for event in job.events():
                        yield event
                finally:
                    gate.in_flight -= 1
            return StreamingResponse(stream(), media_type="text/event-stream")
        body = await job.answer(request.receive)
        return JSONResponse(body) if body is not None else Response(status_code=499)

    def retry_after(status: int) -> int:
        ahead = engine.queued_rows + (engine.slots_in_use if status == 503 else 0)
        return retry_after_s(ahead, engine.mean_service_s, engine.max_rows)

    def endpoint(chat: bool, name: str):
        async def handle(request: Request):
            gate.in_flight += 1
            try:
                response = await generate(request, chat)
            except P.RequestError as e:
                response = _error(e, {"Retry-After": str(retry_after(e.status))} if e.status in (429, 503) else None)
            except Exception as e:  # a bug or a failed decode: a 500 for this request, the server stays up
                log.exception("request failed")
                response = _error(P.RequestError(500, f"internal error: {type(e).__name__}: {e}"))
            finally:
                gate.in_flight -= 1
            metrics.requests.labels(name, str(response.status_code)).inc()
            return response
        return handle

    routes = [Route("/health", health), Route("/v1/models", models), Route("/metrics", metrics_text),
              Route("/openapi.json", openapi),
              Route("/v1/completions", endpoint(False, "completions"), methods=["POST"]),
              Route("/v1/chat/completions", endpoint(True, "chat"), methods=["POST"])]
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


def load_for_serving(model, path, workdir, dtype: str = "float32", mesh=None):
    """(cfg, params, tokenizer, name) for `--model/--path` (`--model` None: from --path, else
    smollm2-135m) or a training `--workdir` (its newest readable checkpoint over the model and
    tokenizer its config.json names: `checkpoint.load_workdir`, char-vocabulary runs included,
    served as `ServedCharVocab`)."""
    if workdir:
        loaded = load_workdir(workdir, dtype=dtype, mesh=mesh)
        step = loaded.source.rsplit("@", 1)[1]
        run_model = (fileio.read_json(f"{workdir.rstrip('/')}/config.json").get("model") or {}).get("name") or "model"
        log.info("serving %s", loaded.source)
        tok = ServedCharVocab(loaded.tokenizer.chars) if isinstance(loaded.tokenizer, CharVocab) else loaded.tokenizer
        return loaded.cfg, loaded.params, tok, f"{run_model}@{step}"
    loaded = load(model, path, dtype=dtype, mesh=mesh)
    return loaded.cfg, loaded.params, loaded.tokenizer, model or (os.path.basename(os.path.normpath(path)) if path
                                                                  else "smollm2-135m")


class _DrainingServer(uvicorn.Server):
    """uvicorn whose first SIGTERM / SIGINT drains: `/health` and new requests answer 503,
    requests in flight finish (at most `drain_s`), then it shuts down; a second one is uvicorn's."""

    def __init__(self, config, gate: Gate, drain_s: float):
        super().__init__(config)
        self.gate, self.drain_s = gate, drain_s

    def handle_exit(self, sig, frame) -> None:
        if self.gate.draining:
            return super().handle_exit(sig, frame)
        self.gate.draining = True
        log.info("draining: %d requests in flight", self.gate.in_flight)
        threading.Thread(target=self._exit_when_drained, args=(sig, frame), daemon=True).start()

    def _exit_when_drained(self, sig, frame) -> None:
        deadline = time.monotonic() + self.drain_s
        while self.gate.in_flight > 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        super().handle_exit(sig, frame)


def api_key_of(args) -> Optional[str]:
    """`--api-key`, else the environment variable `--api-key-env` names (it must be set)."""
    if args.api_key:
        return args.api_key
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise ValueError(f"--api-key-env {args.api_key_env}: that environment variable is not set or empty")
        return key
    return None


def serve(args) -> None:
    """Load, start the engine (it compiles its first program), run uvicorn until SIGTERM drains it."""
    key = api_key_of(args)
    if args.max_queued_requests is not None and args.max_queued_requests < 0:
        raise ValueError(f"--max-queued-requests {args.max_queued_requests}; must be >= 0")
    mesh = make_mesh(args.mesh) if args.mesh else None
    cfg, params, tok, name = load_for_serving(args.model, args.path, args.workdir, args.dtype, mesh)
    if tok is None:
        raise ValueError(f"model {args.model or args.path!r} has no tokenizer to serve (tokenizer.json missing)")
    engine = Engine(cfg, params, tok, mesh=mesh, max_rows=args.max_batch_rows, wait_s=args.batch_wait_ms / 1000,
                    prompt_buckets=args.prompt_buckets, warmup_max_tokens=args.warmup_max_tokens,
                    decode_chunk=args.decode_chunk, max_stop_ids=P.MAX_STOP_IDS)
    gate = Gate()
    app = build_app(engine, args.served_name or name, key, args.max_queued_requests, gate)
    t0 = time.time()
    log.info("serving %s on http://%s:%d (context %d%s)", args.served_name or name, args.host, args.port,
             cfg.max_position, ", API key required" if key else "")
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", timeout_graceful_shutdown=30)
    # uvicorn re-raises the signal it caught once it has shut down: ours lets the process exit 0
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        _DrainingServer(config, gate, drain_s=args.drain_timeout).run()
    finally:
        signal.signal(signal.SIGTERM, previous)
    engine.stop()
    log.info("stopped after %.0f s", time.time() - t0)
