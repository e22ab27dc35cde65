"""OpenAI request and response bodies for `prd-jax serve`, as pydantic models.

Requests are parsed strictly (`extra="forbid"`, no type coercion): an unknown field, a value
of the wrong type or out of range, and a field this server does not honour set to anything
but its neutral value (`REFUSED`: penalties, `logit_bias`, `response_format` other than text,
`tools`, `echo`, `suffix`, ...) get a `RequestError`: a 400 whose OpenAI-style JSON error
names the field. Honoured beyond the basics, as vLLM takes them: `stream` with
`stream_options.include_usage`; `stop` strings (checked at every decode chunk, `serve.text`);
`stop_token_ids`, `ignore_eos`, `min_tokens`; `logprobs` / `top_logprobs` (up to 20
alternatives at every position); `return_token_ids`, `return_tokens_as_token_ids`,
`chat_template_kwargs`, `continue_final_message`, `add_generation_prompt`; `user` is
accepted and has no effect.
`openapi()` is the OpenAPI document served at `/openapi.json`.
"""

from __future__ import annotations

import random
import time
import uuid
from typing import Any, Dict, List, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.json_schema import models_json_schema

MAX_N = 64
MAX_STOP = 4
MAX_STOP_IDS = 16
MAX_TOP = 20  # alternatives per position (vLLM's default max_logprobs; slots.MAX_TOP)


class RequestError(Exception):
    def __init__(self, status: int, message: str, param: str = ""):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def body(self) -> dict:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param or None,
                          "code": "model_not_found" if self.status == 404 else None}}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class StreamOptions(_Strict):
    include_usage: bool = False


class _Request(_Strict):
    """Fields both endpoints take."""

    model: str
    temperature: Optional[float] = Field(None, ge=0, le=2)
    top_p: Optional[float] = Field(None, gt=0, le=1)
    top_k: Optional[int] = Field(None, ge=-1, description="0 or -1: no top-k filter")
    n: Optional[int] = Field(None, ge=1, le=MAX_N)
    seed: Optional[int] = None
    stop: Union[str, List[str], None] = None
    stop_token_ids: Optional[List[int]] = Field(None, max_length=MAX_STOP_IDS)
    ignore_eos: bool = False
    min_tokens: int = Field(0, ge=0)
    stream: Optional[bool] = False
    stream_options: Optional[StreamOptions] = None
    return_token_ids: bool = False
    return_tokens_as_token_ids: bool = False
    user: Optional[str] = None
    # refused unless neutral (REFUSED)
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    repetition_penalty: Optional[float] = None
    min_p: Optional[float] = None
    logit_bias: Optional[Dict[str, float]] = None
    response_format: Optional[Dict[str, Any]] = None
    best_of: Optional[int] = None


class CompletionRequest(_Request):
    prompt: Union[str, List[Union[int, str, List[int]]]]
    max_tokens: Optional[int] = Field(None, ge=1)
    logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP)
    echo: Optional[bool] = None
    suffix: Optional[str] = None


class ContentPart(_Strict):
    type: Literal["text"]
    text: str


class ChatMessage(_Strict):
    role: Literal["system", "user", "assistant"]
    content: Union[str, List[ContentPart]]


class ChatRequest(_Request):
    messages: List[ChatMessage] = Field(min_length=1)
    max_tokens: Optional[int] = Field(None, ge=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    logprobs: Optional[bool] = False
    top_logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP)
    chat_template_kwargs: Optional[Dict[str, Any]] = None
    continue_final_message: bool = False
    add_generation_prompt: Optional[bool] = None  # default: not with continue_final_message
    tools: Optional[List[Any]] = None
    tool_choice: Optional[Any] = None
    functions: Optional[List[Any]] = None
    parallel_tool_calls: Optional[bool] = None


# field -> the values it may take (None always): anything else is refused with a 400
REFUSED = {"presence_penalty": (0, 0.0), "frequency_penalty": (0, 0.0), "repetition_penalty": (1, 1.0),
           "min_p": (0, 0.0), "logit_bias": ({},), "response_format": ({"type": "text"},), "best_of": (1,),
           "echo": (False,), "suffix": ("",), "tools": ([],), "tool_choice": ("none",), "functions": ([],),
           "parallel_tool_calls": (False, True)}


_TYPE_TAGS = ("str", "int", "float", "bool", "list", "dict", "none")


def _param(loc) -> str:
    """The field path of a pydantic error location, without the union member tags it adds."""
    return ".".join(str(x) for x in loc if not (isinstance(x, str) and (x.split("[")[0] in _TYPE_TAGS or "-" in x
                                                                           or x[:1].isupper())))


def parse(kind, body: Any):
    """`body` as `kind` (`CompletionRequest` / `ChatRequest`), or a 400 naming the first bad field."""
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object", "body")
    try:
        req = kind.model_validate(body)
    except ValidationError as e:
        err = e.errors()[0]
        field = _param(err["loc"])
        if err["type"] == "extra_forbidden":
            allowed = sorted(kind.model_fields) if len(err["loc"]) == 1 else []
            raise RequestError(400, f"unknown field '{field}'" + (f"; allowed: {', '.join(allowed)}" if allowed else ""),
                               field)
        if err["type"] == "missing":
            raise RequestError(400, f"'{field}' is required", field)
        raise RequestError(400, f"'{field}' is {err.get('input')!r}: {err['msg']}", field)
    for field, neutral in REFUSED.items():
        value = getattr(req, field, None)
        if value is not None and value not in neutral:
            raise RequestError(400, f"'{field}' is not supported by prd-jax serve; allowed: "
                                    f"{' or '.join(repr(v) for v in neutral)} (or absent)", field)
    return req


def sampling_fields(req: _Request) -> dict:
    """temperature, top_p, top_k, n, seed (one is drawn when absent: sampling is then not
    reproducible, as on other servers)."""
    seed = req.seed
    return {"temperature": 1.0 if req.temperature is None else float(req.temperature),
            "top_p": 1.0 if req.top_p is None else float(req.top_p), "top_k": max(0, req.top_k or 0),
            "n": req.n or 1, "seed": random.SystemRandom().randrange(2 ** 31) if seed is None else seed % 2 ** 31}


def stop_strings(req: _Request) -> List[str]:
    stop = [req.stop] if isinstance(req.stop, str) else (req.stop or [])
    if not all(stop) or len(stop) > MAX_STOP:
        raise RequestError(400, f"'stop' is {req.stop!r}; allowed: a non-empty string or a list of at most "
                                f"{MAX_STOP}", "stop")
    return stop


def stop_ids(req: _Request, tokenizer) -> Optional[List[int]]:
    """The row's stop ids: the tokenizer's (none with `ignore_eos`) and `stop_token_ids`; None: the tokenizer's."""
    extra = req.stop_token_ids or []
    if any(not 0 <= t < tokenizer.vocab_size for t in extra):
        raise RequestError(400, f"'stop_token_ids' {extra}: ids must be in [0, {tokenizer.vocab_size})",
                           "stop_token_ids")
    if not extra and not req.ignore_eos:
        return None
    return list(dict.fromkeys(([] if req.ignore_eos else list(tokenizer.stop_ids)) + extra))


def check_model(req: _Request, served: str) -> None:
    if req.model != served:
        raise RequestError(404, f"model {req.model!r} is not served here; available: [{served!r}]", "model")


def prompts_of(req: CompletionRequest, tokenizer) -> List[List[int]]:
    """The completions `prompt` as token-id lists: a string, a list of ids, or a list of either."""
    p, vocab = req.prompt, tokenizer.vocab_size

    def ids_ok(x):
        return isinstance(x, list) and x and all(isinstance(t, int) and 0 <= t < vocab for t in x)

    if isinstance(p, str) and p:
        return [tokenizer.encode(p, add_bos=None)]
    if ids_ok(p):
        return [list(p)]
    if isinstance(p, list) and p and all((isinstance(x, str) and x) or ids_ok(x) for x in p):
        return [tokenizer.encode(x, add_bos=None) if isinstance(x, str) else list(x) for x in p]
    raise RequestError(400, f"'prompt' must be a non-empty string, a list of token ids in [0, {vocab}), or a list "
                            "of those", "prompt")


def chat_prompt(req: ChatRequest, tokenizer) -> List[int]:
    """Ids of `messages` rendered with the chat template (`chat_template_kwargs` passed
    through); with `continue_final_message` the last (assistant) message is left open."""
    clean = [{"role": m.role, "content": m.content if isinstance(m.content, str) else
              "".join(part.text for part in m.content)} for m in req.messages]
    kwargs = req.chat_template_kwargs or {}
    if req.continue_final_message:
        if clean[-1]["role"] != "assistant":
            raise RequestError(400, "continue_final_message needs the last message to be the assistant's",
                               "continue_final_message")
        if req.add_generation_prompt:
            raise RequestError(400, "add_generation_prompt and continue_final_message cannot both be true",
                               "add_generation_prompt")
        text = tokenizer.apply_chat_template(clean[:-1], True, **kwargs) + clean[-1]["content"]
    else:
        add = req.add_generation_prompt is not False
        text = tokenizer.apply_chat_template(clean, add, **kwargs)
    return tokenizer.encode(text)


def check_context(prompt_tokens: int, max_tokens: int, context: int) -> None:
    """A prompt plus its budget past the model context is refused, naming the limit."""
    if prompt_tokens >= context:
        raise RequestError(400, f"the prompt has {prompt_tokens} tokens; this model's maximum context length is "
                                f"{context} tokens", "prompt")
    if prompt_tokens + max_tokens > context:
        raise RequestError(400, f"this model's maximum context length is {context} tokens; the prompt has "
                                f"{prompt_tokens} tokens and max_tokens is {max_tokens} "
                                f"({prompt_tokens + max_tokens} in all)", "max_tokens")


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionLogprobs(BaseModel):
    tokens: List[str]
    token_logprobs: List[float]
    top_logprobs: Optional[List[Dict[str, float]]] = None
    text_offset: List[int]


class CompletionChoice(BaseModel):
    index: int
    text: str
    finish_reason: Optional[Literal["stop", "length"]] = None
    logprobs: Optional[CompletionLogprobs] = None
    token_ids: Optional[List[int]] = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: List[CompletionChoice]
    usage: Optional[Usage] = None


class TopLogprob(BaseModel):
    token: str
    logprob: float


class TokenLogprob(TopLogprob):
    top_logprobs: List[TopLogprob]


class ChatLogprobs(BaseModel):
    content: List[TokenLogprob]


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int
    message: AssistantMessage
    finish_reason: Literal["stop", "length"]
    logprobs: Optional[ChatLogprobs] = None
    token_ids: Optional[List[int]] = None


class ChatResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: List[ChatChoice]
    usage: Usage


class Delta(BaseModel):
    role: Optional[Literal["assistant"]] = None
    content: Optional[str] = None


class ChatChunkChoice(BaseModel):
    index: int
    delta: Delta
    finish_reason: Optional[Literal["stop", "length"]] = None
    logprobs: Optional[ChatLogprobs] = None
    token_ids: Optional[List[int]] = None


class ChatChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: List[ChatChunkChoice]
    usage: Optional[Usage] = None


class CompletionChunk(CompletionResponse):
    """A streamed completions event (OpenAI streams `text_completion` objects)."""


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: Optional[str] = None
    code: Optional[str] = None


class ErrorResponse(BaseModel):
    error: ErrorDetail


def new_id(kind: str) -> str:
    return f"{'chatcmpl' if kind.startswith('chat') else 'cmpl'}-{uuid.uuid4().hex[:24]}"


def now() -> int:
    return int(time.time())


def usage(prompt_tokens: int, completion_tokens: int) -> Usage:
    return Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                 total_tokens=prompt_tokens + completion_tokens)


def openapi(title: str) -> dict:
    """The OpenAPI 3.1 document of the two generation endpoints (bodies from the models above)."""
    models = [(m, "validation") for m in (CompletionRequest, ChatRequest)] + \
        [(m, "serialization") for m in (CompletionResponse, ChatResponse, CompletionChunk, ChatChunk, ErrorResponse)]
    refs, schema = models_json_schema(models, ref_template="#/components/schemas/{model}")

    def ref(model, mode="serialization"):
        return refs[(model, mode)]

    def post(summary, request, response, chunk):
        errors = {str(code): {"description": what, "content": {"application/json": {"schema": ref(ErrorResponse)}}}
                  for code, what in ((400, "a field is missing, malformed, out of range or not supported"),
                                     (401, "missing or wrong API key"), (404, "unknown model"),
                                     (429, "the queue is full (Retry-After)"), (503, "draining or loading"))}
        return {"post": {"summary": summary, "requestBody": {"required": True, "content": {
            "application/json": {"schema": ref(request, "validation")}}}, "responses": {
            "200": {"description": "the completion; with stream: server-sent events of chunks, then [DONE]",
                    "content": {"application/json": {"schema": ref(response)},
                                "text/event-stream": {"schema": ref(chunk)}}}, **errors}}}

    return {"openapi": "3.1.0", "info": {"title": title, "version": "1"},
            "paths": {"/v1/completions": post("text completion", CompletionRequest, CompletionResponse,
                                              CompletionChunk),
                      "/v1/chat/completions": post("chat completion", ChatRequest, ChatResponse, ChatChunk),
                      "/v1/models": {"get": {"summary": "the served model"}},
                      "/health": {"get": {"summary": "200 once ready, 503 while loading or draining"}},
                      "/metrics": {"get": {"summary": "Prometheus metrics"}}},
            "components": {"schemas": schema.get("$defs", {})}}
