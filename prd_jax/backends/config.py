"""`config.backend`: which LM the operators call (DESIGN principle 8).

`kind="jax"` runs the in-graph decoder (the default). `kind="openai"` sends every model
call of the same compiled operator program to an OpenAI-compatible endpoint:
`api="completions"` posts token ids to `/v1/completions` (vLLM, SGLang, `prd-jax serve`),
`api="chat"` posts text to `/v1/chat/completions` (OpenAI o-series, Gemini's
OpenAI-compatible endpoint, any chat server).

`endpoint` names the kind of server (`backends.endpoints.ENDPOINTS`: openai_reasoning,
gemini, vllm, sglang, prd_jax, transformers, or the generic chat / completions); its row
decides which request fields are sent and under which names (the budget's field,
sampling, top-k off, seed, log-probabilities, token ids back). `reasoning_effort` is sent
when set; `thinking_budget` > 0 sends Gemini's `thinking_config.thinking_budget`, and -1
sends each call's own token budget there. `token_param`, `send_sampling` and
`chat_prefill` moved into the endpoint rows (`MOVED` names where).

Every field is checked before any request is sent; an error names the field and what is
allowed. The key is never in the config: `api_key_env` names the environment variable.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

import ml_collections

from prd_jax.backends.endpoints import ENDPOINTS, endpoint_for

KINDS = ("jax", "openai")
MOVED = {"token_param": "config.backend.endpoint (openai_reasoning sends max_completion_tokens)",
         "send_sampling": "config.backend.endpoint (openai_reasoning sends no temperature / top_p)",
         "chat_prefill": "config.backend.endpoint (vllm, sglang, prd_jax continue the final message)"}
APIS = ("completions", "chat")
EFFORTS = ("", "minimal", "low", "medium", "high")


def default_backend() -> ml_collections.ConfigDict:
    """The `backend` sub-config every eval config has (added when a config file has none),
    so `--config.backend.FIELD=...` overrides work on any eval config."""
    return ml_collections.ConfigDict(dict(
        kind="jax", base_url="", model="", api="", endpoint="", api_key_env="OPENAI_API_KEY",
        max_concurrency=16, timeout_s=600.0, max_retries=8, retry_base_s=1.0, tokenizer="", reasoning_effort="",
        thinking_budget=0, send_seed=True, rating_top_logprobs=20, rating_max_tokens=1024,
        stop_after_refusals=3,
        price_input_per_mtok=0.0, price_output_per_mtok=0.0))


def _moved(names) -> None:
    moved = sorted(set(names) & set(MOVED))
    if moved:
        raise ValueError(f"config.backend.{moved[0]} moved: set {MOVED[moved[0]]}; allowed endpoints: "
                         f"{tuple(ENDPOINTS)}")


def with_backend(config):
    """`config` with a complete `backend` sub-config: the defaults, then the file's own fields."""
    full = default_backend()
    given = config.get("backend") if "backend" in config else None
    if given is not None:
        unknown = sorted(set(given.keys()) - set(full.keys()))
        _moved(unknown)
        if unknown:
            raise ValueError(f"config.backend has unknown fields {unknown}; allowed: {sorted(full.keys())}")
        for k in given.keys():
            full[k] = given[k]
    config.backend = full
    return config


@dataclasses.dataclass(frozen=True)
class BackendConfig:
    """Validated `config.backend` (see the module docstring for the fields' meaning)."""

    kind: str = "jax"
    base_url: str = ""
    model: str = ""
    api: str = ""
    endpoint: str = ""  # a row of backends.endpoints.ENDPOINTS; "" = the generic row of `api`
    api_key_env: str = "OPENAI_API_KEY"
    max_concurrency: int = 16
    timeout_s: float = 600.0
    max_retries: int = 8
    retry_base_s: float = 1.0  # backoff base: retry i waits base * 2^i (jittered, capped at 60 s)
    tokenizer: str = ""
    reasoning_effort: str = ""
    thinking_budget: int = 0
    send_seed: bool = True  # a per-sample seed in each body where the endpoint takes one (always in the cache key)
    rating_top_logprobs: int = 20  # capped by the endpoint's own limit
    rating_max_tokens: int = 1024  # a rating read without log-probabilities: room to reason, then write the digit
    stop_after_refusals: int = 3  # a 400 naming a parameter: stop the run after this many
    price_input_per_mtok: float = 0.0
    price_output_per_mtok: float = 0.0

    @property
    def remote(self) -> bool:
        return self.kind == "openai"

    def __post_init__(self):
        if self.kind == "openai" and not self.api and self.endpoint in ENDPOINTS:
            apis = ENDPOINTS[self.endpoint].apis
            if len(apis) == 1:  # an endpoint that serves one API names it
                object.__setattr__(self, "api", apis[0])

    def endpoint_row(self):
        """The `backends.endpoints.Endpoint` this backend's requests follow."""
        return endpoint_for(self.endpoint, self.api)

    @classmethod
    def from_config(cls, backend) -> "BackendConfig":
        """From a ConfigDict / dict (None: in-graph); raises naming the bad field."""
        if backend is None:
            return cls()
        raw = backend.to_dict() if hasattr(backend, "to_dict") else dict(backend)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(raw) - names)
        _moved(unknown)
        if unknown:
            raise ValueError(f"config.backend has unknown fields {unknown}; allowed: {sorted(names)}")
        out = cls(**raw)
        out.validate()
        return out

    def validate(self) -> None:
        def bad(field, value, allowed):
            raise ValueError(f"config.backend.{field}={value!r}; allowed: {allowed}")

        if self.kind not in KINDS:
            bad("kind", self.kind, KINDS)
        if not self.remote:
            return
        if not self.base_url.startswith(("http://", "https://")):
            bad("base_url", self.base_url, "an http(s) URL of the API root, e.g. http://127.0.0.1:8000/v1")
        if not self.model:
            bad("model", self.model, "the served model's name (non-empty)")
        if self.endpoint and self.endpoint not in ENDPOINTS:
            bad("endpoint", self.endpoint, tuple(ENDPOINTS) + ("'' (the generic row of api)",))
        if self.api not in APIS:
            bad("api", self.api, APIS)
        e = self.endpoint_row()
        if self.api not in e.apis:
            bad("api", self.api, f"{e.apis} (endpoint {e.name!r})")
        if self.reasoning_effort not in EFFORTS:
            bad("reasoning_effort", self.reasoning_effort, EFFORTS)
        if self.reasoning_effort and not e.reasoning_effort:
            bad("reasoning_effort", self.reasoning_effort, f"'' (endpoint {e.name!r} takes none)")
        if self.thinking_budget and not e.thinking_budget:
            bad("thinking_budget", self.thinking_budget, f"0 (only endpoint 'gemini' takes one; this is {e.name!r})")
        if self.reasoning_effort and self.thinking_budget:
            raise ValueError("config.backend.reasoning_effort and thinking_budget are both set; Gemini refuses "
                             "both in one request: set one")
        if self.rating_max_tokens < 1:
            bad("rating_max_tokens", self.rating_max_tokens, "an integer >= 1")
        if self.stop_after_refusals < 1:
            bad("stop_after_refusals", self.stop_after_refusals, "an integer >= 1")
        if self.max_concurrency < 1:
            bad("max_concurrency", self.max_concurrency, "an integer >= 1")
        if not self.timeout_s > 0:
            bad("timeout_s", self.timeout_s, "seconds > 0")
        if self.retry_base_s < 0:
            bad("retry_base_s", self.retry_base_s, "seconds >= 0")
        if self.max_retries < 0:
            bad("max_retries", self.max_retries, "an integer >= 0")
        if self.thinking_budget < -1:
            bad("thinking_budget", self.thinking_budget, "0 (not sent), -1 (each call's budget) or > 0 tokens")
        if not 1 <= self.rating_top_logprobs <= 20_000:
            bad("rating_top_logprobs", self.rating_top_logprobs, "1..20000 (vLLM's default cap is 20)")
        if self.price_input_per_mtok < 0 or self.price_output_per_mtok < 0:
            bad("price_input_per_mtok / price_output_per_mtok", (self.price_input_per_mtok,
                                                                 self.price_output_per_mtok), "prices >= 0")
        if self.api_key_env and not self.api_key_env.replace("_", "").isalnum():
            bad("api_key_env", self.api_key_env, "the NAME of an environment variable (or '' for no key)")

    def api_key(self) -> Optional[str]:
        """The key from the environment (never from a file); None when `api_key_env` is ''.
        A named variable that is unset raises before any request is sent."""
        if not self.api_key_env:
            return None
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ValueError(f"config.backend.api_key_env={self.api_key_env!r}: that environment variable is "
                             "not set; export it, or set api_key_env='' for a server that takes no key")
        return key

    def replace_key_env(self) -> "BackendConfig":
        """A copy that needs no key (estimates send nothing)."""
        return dataclasses.replace(self, api_key_env="")

    def settings(self) -> dict:
        """The fields that change results (a workdir's rows resume only under the same ones)."""
        return {k: getattr(self, k) for k in ("kind", "base_url", "model", "api", "endpoint",
                                              "reasoning_effort", "thinking_budget")}
