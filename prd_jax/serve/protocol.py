"""OpenAI request parsing and response bodies for `prd-jax serve`.

A bad request raises `RequestError(status, message, param)`: the server answers it with an
OpenAI-style JSON error that names the field, and stays up. Supported beyond the basics:
`return_token_ids` (vLLM: generated ids per choice), `return_tokens_as_token_ids`
(`token_id:N` logprob tokens), `chat_template_kwargs` and `continue_final_message`
(vLLM's chat extensions). Top alternatives (`logprobs` > 0 on completions, `top_logprobs`
> 0 on chat) are returned for the first generated position only (later positions carry
their own logprob and no alternatives); `echo` and `stream` are refused.
"""

from __future__ import annotations

import random
import time
import uuid
from typing import List

MAX_N = 64
MAX_STOP = 4


class RequestError(Exception):
    def __init__(self, status: int, message: str, param: str = ""):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def body(self) -> dict:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param or None,
                          "code": "model_not_found" if self.status == 404 else None}}


def _num(req: dict, field: str, default, kind, lo=None, hi=None, lo_open=False):
    value = req.get(field, default)
    if value is None:
        value = default
    ok = isinstance(value, kind) and not isinstance(value, bool)
    if ok and lo is not None:
        ok = value > lo if lo_open else value >= lo
    if ok and hi is not None:
        ok = value <= hi
    if not ok:
        lo_text = "" if lo is None else (f"> {lo}" if lo_open else f">= {lo}")
        hi_text = "" if hi is None else f"<= {hi}"
        allowed = " and ".join(t for t in (lo_text, hi_text) if t) or "a number"
        raise RequestError(400, f"'{field}' is {value!r}; allowed: {'an integer' if kind is int else 'a number'} "
                                f"{allowed}", field)
    return value


def sampling_fields(req: dict) -> dict:
    """temperature, top_p, top_k, n, seed (one is drawn when absent: sampling is then not
    reproducible, as on other servers)."""
    top_k = _num(req, "top_k", 0, int, -1)
    seed = req.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
        raise RequestError(400, f"'seed' is {seed!r}; allowed: an integer", "seed")
    return {"temperature": float(_num(req, "temperature", 1.0, (int, float), 0, 2)),
            "top_p": float(_num(req, "top_p", 1.0, (int, float), 0, 1, lo_open=True)),
            "top_k": max(0, top_k), "n": _num(req, "n", 1, int, 1, MAX_N),
            "seed": random.SystemRandom().randrange(2 ** 31) if seed is None else seed % 2 ** 31}


def stop_strings(req: dict) -> List[str]:
    stop = req.get("stop")
    if stop is None:
        return []
    stop = [stop] if isinstance(stop, str) else stop
    if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop) or len(stop) > MAX_STOP:
        raise RequestError(400, f"'stop' is {req.get('stop')!r}; allowed: a non-empty string or a list of at most "
                                f"{MAX_STOP}", "stop")
    return stop


def check_model(req: dict, served: str) -> None:
    model = req.get("model")
    if model != served:
        raise RequestError(404, f"model {model!r} is not served here; available: [{served!r}]", "model")


def prompts_of(req: dict, tokenizer) -> List[List[int]]:
    """The completions `prompt` as token-id lists: a string, a list of ids, or a list of either."""
    p = req.get("prompt")
    vocab = tokenizer.vocab_size

    def ids_ok(x):
        return isinstance(x, list) and x and all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab
                                                 for t in x)

    if isinstance(p, str) and p:
        return [tokenizer.encode(p, add_bos=None)]
    if ids_ok(p):
        return [list(p)]
    if isinstance(p, list) and p and all((isinstance(x, str) and x) or ids_ok(x) for x in p):
        return [tokenizer.encode(x, add_bos=None) if isinstance(x, str) else list(x) for x in p]
    raise RequestError(400, f"'prompt' must be a non-empty string, a list of token ids in [0, {vocab}), or a list "
                            "of those", "prompt")


def chat_prompt(req: dict, tokenizer) -> List[int]:
    """Ids of `messages` rendered with the chat template (`chat_template_kwargs` passed
    through); with `continue_final_message` the last (assistant) message is left open."""
    messages = req.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list of {role, content}", "messages")
    clean = []
    for i, m in enumerate(messages):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, list):  # [{"type": "text", "text": ...}]
            content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant") or \
                not isinstance(content, str):
            raise RequestError(400, f"messages[{i}] must have role system/user/assistant and string content",
                               f"messages[{i}]")
        clean.append({"role": m["role"], "content": content})
    kwargs = req.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise RequestError(400, "'chat_template_kwargs' must be an object", "chat_template_kwargs")
    if req.get("continue_final_message"):
        if clean[-1]["role"] != "assistant":
            raise RequestError(400, "continue_final_message needs the last message to be the assistant's",
                               "continue_final_message")
        text = tokenizer.apply_chat_template(clean[:-1], True, **kwargs) + clean[-1]["content"]
    else:
        text = tokenizer.apply_chat_template(clean, True, **kwargs)
    return tokenizer.encode(text)


def refuse(req: dict) -> None:
    for field in ("stream", "echo"):
        if req.get(field):
            raise RequestError(400, f"'{field}' is not supported by prd-jax serve; allowed: false", field)


def check_context(prompt_tokens: int, max_tokens: int, context: int) -> None:
    """A prompt plus its budget past the model context is refused, naming the limit."""
    if prompt_tokens >= context:
        raise RequestError(400, f"the prompt has {prompt_tokens} tokens; this model's maximum context length is "
                                f"{context} tokens", "prompt")
    if prompt_tokens + max_tokens > context:
        raise RequestError(400, f"this model's maximum context length is {context} tokens; the prompt has "
                                f"{prompt_tokens} tokens and max_tokens is {max_tokens} "
                                f"({prompt_tokens + max_tokens} in all)", "max_tokens")


def cut_at_stop(ids: List[int], text_of, stops: List[str]) -> tuple:
    """(ids, text, hit): the shortest prefix whose text holds a stop string, text cut before it."""
    if not stops:
        return ids, text_of(ids), False
    full = text_of(ids)
    if not any(s in full for s in stops):
        return ids, full, False
    for k in range(1, len(ids) + 1):
        text = text_of(ids[:k])
        at = [text.find(s) for s in stops if s in text]
        if at:
            return ids[:k], text[:min(at)], True
    return ids, full, False


def envelope(kind: str, model: str, choices: list, prompt_tokens: int, completion_tokens: int) -> dict:
    return {"id": f"{'chatcmpl' if kind == 'chat.completion' else 'cmpl'}-{uuid.uuid4().hex[:24]}",
            "object": kind, "created": int(time.time()), "model": model, "choices": choices,
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}
