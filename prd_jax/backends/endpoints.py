"""What each kind of OpenAI-compatible endpoint takes, as data (DESIGN principles 8 and 10).

`config.backend.endpoint` names one row of `ENDPOINTS`; every request body of a remote run
is built from that row (`sampling_fields`, `rating_fields`), so a parameter an endpoint
refuses is never sent. docs/backends.md mirrors this table with its sources.

Rows:
- `openai_reasoning`: OpenAI's o-series (o1, o3-mini, o3, o4-mini). The budget is
  `max_completion_tokens` (it covers hidden reasoning; `max_tokens` is refused), and
  `temperature`, `top_p`, `logprobs` / `top_logprobs` are refused with a 400 naming the
  parameter: a forced rating uses the digit the model writes. `reasoning_effort` is sent.
- `gemini`: Gemini's OpenAI-compatible endpoint. `max_tokens`, temperature, top-p, seed;
  no top-k and no log-probabilities through it; a thinking budget goes in
  `extra_body.google.thinking_config.thinking_budget` (or `reasoning_effort`, not both).
  Thought tokens: `usage.completion_tokens_details.reasoning_tokens` when reported, else the
  part of `total_tokens` beyond prompt + completion (`usage_counts`).
- `vllm`, `sglang`: token ids in, sampling sent explicitly with top-k disabled as `-1`
  (their spelling; older vLLM refuses 0), so the served checkpoint's
  `generation_config.json` cannot change it; vLLM returns token ids (`return_token_ids`,
  `return_tokens_as_token_ids`).
- `prd_jax`: `prd-jax serve` (top-k off is 0; token ids back).
- `transformers`: `transformers serve` (chat only: its /v1/completions takes text). It
  refuses unknown fields (`top_k`, `continue_final_message`: 422) and ignores `logprobs`;
  sampling goes in its `generation_config` JSON string, top-k 0 (off) and the stop ids
  included, since that string replaces the checkpoint's defaults (GenerationConfig's
  top_k default is 50).
- `chat`, `completions`: any other server, by the OpenAI API's own fields only.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Optional


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One endpoint kind's request rules.

    - `apis`: the `backend.api` values it serves;
    - `budget`: the field a call's token budget goes to (chat; completions always `max_tokens`);
    - `sampling`: temperature and top-p are sent;
    - `top_k`: how top-k is sent: "field" (`top_k`), "generation_config" (inside that JSON
      string) or "" (never); `top_k_off`: how "disabled" is spelled;
    - `seed`: a per-sample seed is sent;
    - `logprobs`: the most top log-probabilities a rating read may ask for (0: none are
      sent, the rating the model writes is read);
    - `reasoning_effort`, `thinking_budget`: those knobs may be set;
    - `token_ids`: completions-mode fields that ask for generated token ids back;
    - `continue_final`: chat mode may continue a final assistant message
      (`continue_final_message`), else a rating is asked for in a follow-up turn;
    - `template_kwargs`: `chat_template_kwargs` is accepted;
    - `source`: where the rules come from (docs/backends.md cites them).
    """

    name: str
    apis: tuple
    budget: str = "max_tokens"
    sampling: bool = True
    top_k: str = ""
    top_k_off: Optional[int] = None
    seed: bool = True
    logprobs: int = 0
    reasoning_effort: bool = False
    thinking_budget: bool = False
    token_ids: tuple = ()
    continue_final: bool = False
    template_kwargs: bool = False
    source: str = ""


ENDPOINTS = {e.name: e for e in (
    Endpoint("openai_reasoning", ("chat",), budget="max_completion_tokens", sampling=False, seed=True, logprobs=0,
             reasoning_effort=True,
             source="OpenAI 400s: 'Unsupported parameter: 'max_tokens' ... Use 'max_completion_tokens'', "
                    "'Unsupported parameter: 'temperature' is not supported with this model' (openai-python #2104); "
                    "logprobs refused by reasoning models (deepeval #1358, #2184)"),
    Endpoint("gemini", ("chat",), logprobs=0, reasoning_effort=True, thinking_budget=True,
             source="ai.google.dev/gemini-api/docs/openai (thinking: reasoning_effort or "
                    "extra_body.google.thinking_config, not both)"),
    Endpoint("vllm", ("completions", "chat"), top_k="field", top_k_off=-1, logprobs=20, continue_final=True,
             template_kwargs=True, token_ids=("return_token_ids", "return_tokens_as_token_ids"),
             source="vLLM: 'top_k must be -1 (disable), or at least 1, got 0' (vllm #17553); "
                    "`--generation-config vllm` ignores the checkpoint's generation_config.json; --max-logprobs 20"),
    Endpoint("sglang", ("completions", "chat"), top_k="field", top_k_off=-1, logprobs=20, continue_final=True,
             template_kwargs=True, source="docs.sglang.io sampling_params: top_k -1 = no top-k"),
    Endpoint("prd_jax", ("completions", "chat"), top_k="field", top_k_off=0, logprobs=20, continue_final=True,
             template_kwargs=True, token_ids=("return_token_ids", "return_tokens_as_token_ids"),
             source="prd_jax/serve/protocol.py"),
    Endpoint("transformers", ("chat",), top_k="generation_config", top_k_off=0, logprobs=0, template_kwargs=True,
             source="transformers/cli/serving (5.24): unknown fields 422, logprobs ignored, "
                    "`generation_config` JSON replaces the model's"),
    Endpoint("chat", ("chat",), logprobs=20, source="OpenAI chat completions API"),
    Endpoint("completions", ("completions",), logprobs=5, source="OpenAI (legacy) completions API"),
)}


def endpoint_for(name: str, api: str) -> Endpoint:
    """The row of `name` ('' = the generic row of `api`); raises naming the field."""
    if not name:
        name = api if api in ("chat", "completions") else ""
    if name not in ENDPOINTS:
        raise ValueError(f"config.backend.endpoint={name!r}; allowed: {tuple(ENDPOINTS)} "
                         "('' = the generic row of config.backend.api)")
    return ENDPOINTS[name]


def sampling_fields(e: Endpoint, chat: bool, max_new: int, temperature: float, top_p: float, top_k: int,
                    seed: Optional[int], stop_ids=()) -> dict:
    """The budget and sampling fields of one request, as endpoint `e` names them. Greedy is
    temperature 0; a top-k of 0 means off and is sent as the endpoint spells off."""
    out = {(e.budget if chat else "max_tokens"): int(max_new)}
    greedy = temperature == 0
    if e.sampling:
        out["temperature"] = 0.0 if greedy else float(temperature)
        out["top_p"] = 1.0 if greedy else float(top_p)
    k = int(top_k) if top_k and not greedy else e.top_k_off
    if e.top_k == "field":
        out["top_k"] = k
    elif e.top_k == "generation_config":
        gen = {"do_sample": not greedy, "top_k": k, "eos_token_id": [int(t) for t in stop_ids]}
        if not greedy:
            gen.update(temperature=float(temperature), top_p=float(top_p))
        out["generation_config"] = json.dumps(gen, sort_keys=True)
    if e.seed and seed is not None:
        out["seed"] = int(seed)
    return out


def rating_fields(e: Endpoint, chat: bool, k: int) -> dict:
    """The log-probability fields of a forced-rating read ({} where the endpoint has none)."""
    if not e.logprobs:
        return {}
    k = min(int(k), e.logprobs)
    if chat:
        return {"logprobs": True, "top_logprobs": k}
    return {"logprobs": k, **({"return_tokens_as_token_ids": True} if "return_tokens_as_token_ids" in e.token_ids
                              else {})}


_PARAM_PATTERNS = (
    re.compile(r"[Uu]nsupported (?:parameter|value): '([A-Za-z_.]+)'"),
    re.compile(r"[Uu]nrecognized request argument supplied: ([A-Za-z_.]+)"),
    re.compile(r"[Uu]nexpected fields in the request: \{'([A-Za-z_.]+)'"),
    re.compile(r"[Uu]nknown name \"([A-Za-z_.]+)\""),
    re.compile(r"does not support the '([A-Za-z_.]+)' parameter"),
)


def refused_param(status: int, body) -> Optional[str]:
    """The request parameter a 400 / 422 answer refuses, when it names one: the OpenAI
    error's `param`, else a parameter quoted by a known message form; None otherwise."""
    if status not in (400, 422):
        return None
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and isinstance(err.get("param"), str) and err["param"]:
        return err["param"]
    if isinstance(err, dict):
        text = str(err.get("message") or "")
    elif isinstance(body, dict):
        text = str(err or body.get("detail") or body.get("message") or "")
    else:
        text = str(body or "")
    for pattern in _PARAM_PATTERNS:
        found = pattern.search(text)
        if found:
            return found.group(1)
    return None


def usage_counts(usage: dict) -> tuple:
    """(completion tokens billed, hidden reasoning tokens among them) of an answer's `usage`.

    OpenAI counts reasoning inside `completion_tokens` and reports it in
    `completion_tokens_details.reasoning_tokens`. A server whose `total_tokens` exceeds
    prompt + completion (Gemini's thought tokens, when not in `completion_tokens`) billed
    the difference as hidden output: it is added to both counts."""
    completion = int(usage.get("completion_tokens") or 0)
    details = usage.get("completion_tokens_details") or {}
    reasoning = int((details.get("reasoning_tokens") if isinstance(details, dict) else 0) or 0)
    total, prompt = usage.get("total_tokens"), int(usage.get("prompt_tokens") or 0)
    beyond = int(total) - prompt - completion if isinstance(total, int) else 0
    if beyond > 0:
        completion += beyond
        reasoning = max(reasoning, beyond)  # a reported count of the same thoughts is not added twice
    return completion, min(reasoning, completion)
